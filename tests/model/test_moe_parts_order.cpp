// The order in which an overlapped MoE layer (model/moe_parts.h) posts its exchanges
// against its experts' compute: what makes the overlap possible at all. A part's dispatch
// must be posted before the previous part's experts start, and a part's combine before the
// next part's experts start; otherwise the rows travel while the rank waits. Recorded by a
// fake exchange that logs every start and finish, and by the experts' callback.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/moe_parts.h"
#include "model/moe_test_util.h"

namespace mt {
namespace {

// "D3+" style names built by appending: GCC 12 warns (-Wrestrict, a false positive, its
// PR105329) on `"D" + std::to_string(p)`.
std::string tag(char kind, int p, const char* suffix = "") {
  std::string s(1, kind);
  s += std::to_string(p);
  s += suffix;
  return s;
}

// Logs "Dp+" / "Cp+" at a dispatch's / combine's start and "Dp-" / "Cp-" at its finish, p
// counting the starts of each kind since the last reset.
class LoggingExchange final : public TokenExchange {
 public:
  std::vector<std::string> log;
  void reset() { log.clear(), dispatches_ = combines_ = 0; }

  int rank() const override { return 0; }
  int size() const override { return 1; }
  void exchange_counts(const int32_t* send, int32_t* recv, int per_rank) override {
    inner_.exchange_counts(send, recv, per_rank);
  }
  void dispatch(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                int width) override {
    log.push_back("D blocking");
    inner_.dispatch(dst, src, staging, c, width);
  }
  void combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
               int width) override {
    log.push_back("C blocking");
    inner_.combine(dst, src, staging, c, width);
  }
  std::unique_ptr<PendingExchange> start_dispatch(float* dst, const float* src, float* staging,
                                                  const ExchangeCounts& c, int width) override {
    return logged(tag('D', dispatches_++), inner_.start_dispatch(dst, src, staging, c, width));
  }
  std::unique_ptr<PendingExchange> start_combine(float* dst, const float* src, float* staging,
                                                 const ExchangeCounts& c, int width) override {
    return logged(tag('C', combines_++), inner_.start_combine(dst, src, staging, c, width));
  }

 private:
  struct Logged final : PendingExchange {
    Logged(std::vector<std::string>& l, std::string n) : log(l), name(std::move(n)) {}
    void finish() override { log.push_back(name + "-"); }
    std::vector<std::string>& log;
    std::string name;
  };
  std::unique_ptr<PendingExchange> logged(std::string name, std::unique_ptr<PendingExchange> p) {
    p->finish();  // the identity exchange has nothing in flight
    log.push_back(name + "+");
    return std::make_unique<Logged>(log, std::move(name));
  }
  IdentityExchange inner_;
  int dispatches_ = 0, combines_ = 0;
};

// Every line names what the rank does, in order; "Ep" are part p's experts.
std::vector<std::string> expected_order(int P) {
  std::vector<std::string> want = {"D0+"};
  for (int p = 0; p < P; ++p) {
    want.push_back(tag('D', p, "-"));
    if (p + 1 < P) want.push_back(tag('D', p + 1, "+"));  // before Ep
    want.push_back(tag('E', p));
    want.push_back(tag('C', p, "+"));  // before E(p+1)
  }
  for (int p = 0; p < P; ++p) want.push_back(tag('C', p, "-"));
  return want;
}

// MoeParts::run alone, 8 tokens top-1 over 2 experts, in P parts.
TEST(MoePartsOrder, NextDispatchAndThisCombinePostedAroundEachPartsExperts) {
  const int rows = 8, El = 2, k = 1, width = 4;
  for (int P : {2, 3, 4}) {
    SlotLayout layout;
    MoeParts parts(P, /*ranks=*/1, El, k, rows, layout);
    std::vector<float> slot(layout.total());
    // Expert-sorted rows: expert 0 has the even tokens, expert 1 the odd ones.
    const std::vector<int32_t> row_token = {0, 2, 4, 6, 1, 3, 5, 7};
    const std::vector<int32_t> row_of = {0, 4, 1, 5, 2, 6, 3, 7};
    const std::vector<int32_t> send_counts = {4, 4};
    LoggingExchange x;
    parts.plan(slot.data(), row_token.data(), row_of.data(), send_counts.data(), rows, rows, x);
    std::vector<float> buf(rows * width), in(buf.size()), out(buf.size()), staging(buf.size());
    int part = 0;
    parts.run(slot.data(), x, buf.data(), in.data(), out.data(), staging.data(), width,
              [&](const ExpertGroups&) { x.log.push_back(tag('E', part++)); });
    EXPECT_EQ(x.log, expected_order(P)) << P << " parts";
  }
}

// The layer runs that pipeline in both passes: its forward and its backward input pass
// each post P dispatches and P combines in the same interleaving, and nothing blocking.
TEST(MoePartsOrder, ForwardAndBackwardBothPipelineTheirExchanges) {
  const int N = 12, C = 8, E = 2, P = 3;
  const ModelConfig cfg = moe_test::config(C, E, 1, 0.0f);
  LoggingExchange x;
  ExpertParallelShard ep{.rank = 0, .size = 1, .exchange = &x};
  ep.overlap_parts = P;
  moe_test::Harness m(cfg, ep, N);
  const auto h = moe_test::random_vec(size_t(N) * C, 3, 1);
  const auto dy = moe_test::random_vec(size_t(N) * C, 3, 2);
  std::vector<float> y(h.size()), dh(h.size());
  // The experts are not visible here: drop them from the expected order.
  std::vector<std::string> want;
  for (const std::string& s : expected_order(P))
    if (s[0] != 'E') want.push_back(s);
  m.layer->forward(m.slot(), h.data(), y.data(), N);
  EXPECT_EQ(x.log, want) << "forward";
  x.reset();
  m.layer->backward_input(m.slot(), h.data(), dy.data(), dh.data(), N);
  EXPECT_EQ(x.log, want) << "backward";
}

}  // namespace
}  // namespace mt
