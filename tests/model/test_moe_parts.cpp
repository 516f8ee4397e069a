// --moe-overlap-parts (model/moe_parts.h): a layer that cuts its microbatch into P parts
// and pipelines their exchanges computes what the layer without parts does. At ep = 1 on
// the identity exchange: every token's output and input gradient the same (each row meets
// the same expert weights; the parts change which GEMM call it is in), the weight gradients
// the same to rounding (summed part by part), including parts of uneven size and more parts
// than a part has rows for some expert; and the layer starts P dispatches and P combines
// per pass after one count exchange. Parts cost no elementwise work of their own: every
// row is rounded to bf16 and activated once per pass, whatever P, and each expert's weight
// gradient is written once per pass (the phase profile's calls and bytes, counted, not
// timed).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/phase_profile.h"
#include "model/forwarding_exchange.h"
#include "model/moe_test_util.h"

namespace mt {
namespace {

using moe_test::Harness;

// Counts the started exchanges an overlapped layer issues.
class CountingExchange final : public moe_test::ForwardingExchange {
 public:
  void exchange_counts(const int32_t* send, int32_t* recv, int per_rank) override {
    ++counts;
    ForwardingExchange::exchange_counts(send, recv, per_rank);
  }
  std::unique_ptr<PendingExchange> start_dispatch(float* dst, const float* src, float* staging,
                                                  const ExchangeCounts& c, int width) override {
    ++dispatches;
    return inner().start_dispatch(dst, src, staging, c, width);
  }
  std::unique_ptr<PendingExchange> start_combine(float* dst, const float* src, float* staging,
                                                 const ExchangeCounts& c, int width) override {
    ++combines;
    return inner().start_combine(dst, src, staging, c, width);
  }
  int counts = 0, dispatches = 0, combines = 0;
};

float rel_diff(const float* a, const float* b, size_t n) {
  double d = 0, s = 0;
  for (size_t i = 0; i < n; ++i) {
    d += double(a[i] - b[i]) * (a[i] - b[i]);
    s += double(a[i]) * a[i];
  }
  return float(std::sqrt(d / std::max(s, 1e-30)));
}

void check_parts(int parts, bool bf16) {
  const int N = 24, C = 16, E = 4;
  const ModelConfig cfg = moe_test::config(C, E, 2, 1.0f);
  uint64_t version = 1;
  CountingExchange counting;
  ExpertParallelShard whole, split{.rank = 0, .size = 1, .exchange = &counting};
  split.overlap_parts = parts;
  if (bf16) whole.bf16_version = split.bf16_version = &version;
  Harness a(cfg, whole, N), b(cfg, split, N);
  const auto h = moe_test::random_vec(size_t(N) * C, 3, 1);
  const auto dy = moe_test::random_vec(size_t(N) * C, 3, 2);
  std::vector<float> ya(h.size()), yb(h.size()), dha(h.size()), dhb(h.size());
  a.layer->forward(a.slot(), h.data(), ya.data(), N);
  b.layer->forward(b.slot(), h.data(), yb.data(), N);
  EXPECT_EQ(counting.counts, 1);
  EXPECT_EQ(counting.dispatches, parts);
  EXPECT_EQ(counting.combines, parts);
  a.layer->backward_input(a.slot(), h.data(), dy.data(), dha.data(), N);
  b.layer->backward_input(b.slot(), h.data(), dy.data(), dhb.data(), N);
  EXPECT_EQ(counting.dispatches, 2 * parts);
  a.layer->backward_weight(a.slot(), h.data(), N);
  b.layer->backward_weight(b.slot(), h.data(), N);

  const float tol = bf16 ? 1e-2f : 1e-6f;
  EXPECT_LE(rel_diff(ya.data(), yb.data(), ya.size()), tol) << parts << " parts";
  EXPECT_LE(rel_diff(dha.data(), dhb.data(), dha.size()), tol) << parts << " parts";
  for (const ParamInfo& p : a.table.entries())
    EXPECT_LE(rel_diff(a.grad(p.name), b.grad(p.name), p.numel), tol) << p.name;
  EXPECT_GT(b.layer->stats().dropped, 0) << "capacity 1.0 should drop some assignments";
}

TEST(MoeParts, EqualToOnePartFp32) {
  for (int parts : {2, 3, 5, 24}) check_parts(parts, false);
}

TEST(MoeParts, EqualToOnePartBf16) {
  for (int parts : {2, 5}) check_parts(parts, true);
}

// A layer of 24 tokens, 16 features and 4 experts in `parts` parts, fp32 or bf16, with the
// weight version and the exchange it points at.
struct PartedLayer {
  static constexpr int N = 24, C = 16, E = 4;
  uint64_t version = 1;
  CountingExchange counting;
  Harness m;
  PartedLayer(int parts, bool bf16) : m(moe_test::config(C, E, 2, 0.0f), shard(parts, bf16), N) {}

 private:
  ExpertParallelShard shard(int parts, bool bf16) {
    ExpertParallelShard ep{.rank = 0, .size = 1, .exchange = &counting};
    ep.overlap_parts = parts;
    if (bf16) ep.bf16_version = &version;
    return ep;
  }
};

// The activation and conversion bytes of one pass (after a first pass, which converts the
// bf16 weight copies) of a layer in `parts` parts.
PhaseTotals elementwise_traffic(int parts, bool bf16) {
  PartedLayer l(parts, bf16);
  return moe_test::phases_of_second_pass(l.m, PartedLayer::N, PartedLayer::C);
}

TEST(MoeParts, EachRowIsConvertedAndActivatedOnce) {
  for (bool bf16 : {false, true}) {
    const PhaseTotals one = elementwise_traffic(1, bf16);
    EXPECT_GT(one.bytes[int(Phase::activation)], 0);
    if (bf16) {
      EXPECT_GT(one.bytes[int(Phase::conversion)], 0);
    }
    for (int parts : {2, 5}) {
      const PhaseTotals split = elementwise_traffic(parts, bf16);
      for (Phase p : {Phase::activation, Phase::conversion})
        EXPECT_EQ(split.bytes[int(p)], one.bytes[int(p)])
            << phase_name(p) << ", " << parts << " parts" << (bf16 ? ", bf16" : "");
    }
  }
}

// The GEMM phase of backward_weight alone (after a forward and backward_input) of a layer
// in `parts` parts.
PhaseTotals weight_gradient_gemms(int parts, bool bf16) {
  PartedLayer l(parts, bf16);
  Harness& m = l.m;
  const int N = PartedLayer::N;
  const size_t n = size_t(N) * PartedLayer::C;
  const auto h = moe_test::random_vec(n, 3, 1), dy = moe_test::random_vec(n, 3, 2);
  std::vector<float> y(n), dh(n);
  m.layer->forward(m.slot(), h.data(), y.data(), N);
  m.layer->backward_input(m.slot(), h.data(), dy.data(), dh.data(), N);
  PhaseTotals totals;
  attach_phase_totals(&totals);
  m.layer->backward_weight(m.slot(), h.data(), N);
  attach_phase_totals(nullptr);
  return totals;
}

// The weight gradients of P parts are one grouped GEMM per matrix over every part's rows,
// as one part's: each expert's dW read and written once per pass, not once per part (a
// GEMM call's phase bytes count every group's weight once).
TEST(MoeParts, EachWeightGradientIsWrittenOncePerPass) {
  for (bool bf16 : {false, true}) {
    const PhaseTotals one = weight_gradient_gemms(1, bf16);
    const int g = int(Phase::gemm);
    EXPECT_GT(one.calls[g], 0u);
    for (int parts : {2, 5}) {
      const PhaseTotals split = weight_gradient_gemms(parts, bf16);
      EXPECT_EQ(split.calls[g], one.calls[g]) << parts << " parts" << (bf16 ? ", bf16" : "");
      EXPECT_EQ(split.bytes[g], one.bytes[g]) << parts << " parts" << (bf16 ? ", bf16" : "");
    }
  }
}

}  // namespace
}  // namespace mt
