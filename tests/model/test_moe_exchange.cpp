// MoeLayer has one path at every ep: at ep = 1 it makes the same TokenExchange calls as
// under expert parallelism (counts and dispatch, combine in forward; dispatch, combine in
// backward_input; nothing in backward_weight), on the identity exchange. A recording
// exchange handed to an ep = 1 layer sees them, and the layer's results are bit for bit
// those of a layer on its own IdentityExchange, in fp32 and bf16.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/forwarding_exchange.h"
#include "model/moe_test_util.h"

namespace mt {
namespace {

using moe_test::Harness;

class RecordingExchange final : public moe_test::ForwardingExchange {
 public:
  void exchange_counts(const int32_t* send, int32_t* recv, int per_rank) override {
    calls += "counts ";
    ForwardingExchange::exchange_counts(send, recv, per_rank);
  }
  void dispatch(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                int width) override {
    calls += "dispatch ";
    ForwardingExchange::dispatch(dst, src, staging, c, width);
  }
  void combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
               int width) override {
    calls += "combine ";
    ForwardingExchange::combine(dst, src, staging, c, width);
  }
  std::string calls;
};

void check_same_path(bool bf16) {
  const int N = 24, C = 16, E = 4;
  const ModelConfig cfg = moe_test::config(C, E, 2, 1.0f);
  uint64_t version = 1;
  RecordingExchange rec;
  ExpertParallelShard own, recorded{0, 1, &rec};
  if (bf16) own.bf16_version = recorded.bf16_version = &version;
  Harness a(cfg, own, N), b(cfg, recorded, N);
  const auto h = moe_test::random_vec(size_t(N) * C, 3, 1);
  const auto dy = moe_test::random_vec(size_t(N) * C, 3, 2);
  std::vector<float> ya(h.size()), yb(h.size()), dha(h.size()), dhb(h.size());

  a.layer->forward(a.slot(), h.data(), ya.data(), N);
  b.layer->forward(b.slot(), h.data(), yb.data(), N);
  EXPECT_EQ(rec.calls, "counts dispatch combine ");
  a.layer->backward_input(a.slot(), h.data(), dy.data(), dha.data(), N);
  b.layer->backward_input(b.slot(), h.data(), dy.data(), dhb.data(), N);
  EXPECT_EQ(rec.calls, "counts dispatch combine dispatch combine ");
  a.layer->backward_weight(a.slot(), h.data(), N);
  b.layer->backward_weight(b.slot(), h.data(), N);
  EXPECT_EQ(rec.calls, "counts dispatch combine dispatch combine ");

  EXPECT_EQ(ya, yb);
  EXPECT_EQ(dha, dhb);
  for (const ParamInfo& p : a.table.entries())
    EXPECT_TRUE(std::equal(a.grad(p.name), a.grad(p.name) + p.numel, b.grad(p.name))) << p.name;
  EXPECT_GT(a.layer->stats().dropped, 0) << "capacity 1.0 should drop some assignments";
}

TEST(MoeExchange, EpOneTakesTheExpertParallelPathFp32) {
  check_same_path(false);
}

TEST(MoeExchange, EpOneTakesTheExpertParallelPathBf16) {
  check_same_path(true);
}

}  // namespace
}  // namespace mt
