// The order in which an overlapped MoE layer (model/moe_parts.h) posts its exchanges
// against its experts' compute: what makes the overlap possible at all. A part's dispatch
// must be posted before the previous part's experts start, and a part's combine before the
// next part's experts start; otherwise the rows travel while the rank waits. The layer's
// token-side work fills the two waits no expert can: the count exchange travels while
// part 0's rows are gathered, part 0's rows while the other parts' are, and the last
// combine while the earlier parts' results are summed. Recorded by a fake exchange that
// logs every start and finish, and by the stages' callbacks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/phase_profile.h"
#include "model/forwarding_exchange.h"
#include "model/gpt.h"
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
// counting the starts of each kind since the last reset; "K+" / "K-" for a started count
// exchange. on_log (if set) sees each line as it is logged.
class LoggingExchange final : public moe_test::ForwardingExchange {
 public:
  std::vector<std::string> log;
  std::function<void(const std::string&)> on_log;
  void reset() { log.clear(), dispatches_ = combines_ = 0; }
  void note(std::string line) {
    log.push_back(std::move(line));
    if (on_log) on_log(log.back());
  }

  void exchange_counts(const int32_t* send, int32_t* recv, int per_rank) override {
    note("K blocking");
    ForwardingExchange::exchange_counts(send, recv, per_rank);
  }
  std::unique_ptr<PendingExchange> start_exchange_counts(const int32_t* send, int32_t* recv,
                                                         int per_rank) override {
    return logged("K", inner().start_exchange_counts(send, recv, per_rank));
  }
  void dispatch(float* dst, const float* src, float* staging, const ExchangeCounts& c,
                int width) override {
    note("D blocking");
    ForwardingExchange::dispatch(dst, src, staging, c, width);
  }
  void combine(float* dst, const float* src, float* staging, const ExchangeCounts& c,
               int width) override {
    note("C blocking");
    ForwardingExchange::combine(dst, src, staging, c, width);
  }
  std::unique_ptr<PendingExchange> start_dispatch(float* dst, const float* src, float* staging,
                                                  const ExchangeCounts& c, int width) override {
    return logged(tag('D', dispatches_++), inner().start_dispatch(dst, src, staging, c, width));
  }
  std::unique_ptr<PendingExchange> start_combine(float* dst, const float* src, float* staging,
                                                 const ExchangeCounts& c, int width) override {
    return logged(tag('C', combines_++), inner().start_combine(dst, src, staging, c, width));
  }

 private:
  struct Logged final : PendingExchange {
    Logged(LoggingExchange& x, std::string n) : owner(x), name(std::move(n)) {}
    void finish() override { owner.note(name + "-"); }
    LoggingExchange& owner;
    std::string name;
  };
  std::unique_ptr<PendingExchange> logged(std::string name, std::unique_ptr<PendingExchange> p) {
    p->finish();  // the identity exchange has nothing in flight
    note(name + "+");
    return std::make_unique<Logged>(*this, std::move(name));
  }
  int dispatches_ = 0, combines_ = 0;
};

// Every line names what the rank does, in order: "K" the count exchange, "Pp" part p's
// rows prepared, "Ep" its experts, "Fp" its results summed; with `local`, "L1" and "L2" the
// caller's LocalWork halves.
std::vector<std::string> expected_order(int P, bool local = false) {
  std::vector<std::string> want = {"K+", "P0", "K-", "D0+"};
  for (int p = 1; p < P; ++p) {
    want.push_back(tag('P', p));                   // while D0 travels
    if (p == 1) want.push_back(tag('D', 1, "+"));  // two dispatches ahead
  }
  if (local) want.push_back("L1");  // while D0 and D1 travel
  for (int p = 0; p < P; ++p) {
    want.push_back(tag('D', p, "-"));
    if (p + 2 < P) want.push_back(tag('D', p + 2, "+"));  // before Ep: D(p+1), D(p+2) travel
    want.push_back(tag('E', p));
    want.push_back(tag('C', p, "+"));  // before E(p+1)
  }
  if (local) want.push_back("L2");  // while C(P-1) travels, before any combine's wait
  for (int p = 0; p < P; ++p) {     // F0 .. F(P-2) while C(P-1) travels
    want.push_back(tag('C', p, "-"));
    want.push_back(tag('F', p));
  }
  return want;
}

// The lines of `order` the exchange sees (the backward pass has no count exchange), and
// the local work's.
std::vector<std::string> exchanges_of(const std::vector<std::string>& order, bool counts) {
  std::vector<std::string> out;
  for (const std::string& s : order)
    if ((s[0] == 'D' || s[0] == 'C' || s[0] == 'L') || (counts && s[0] == 'K')) out.push_back(s);
  return out;
}

// Local work that logs its two halves on x.
LocalWork logged_local_work(LoggingExchange& x) {
  return {[&x] { x.note("L1"); }, [&x] { x.note("L2"); }};
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
    MoeParts::Stages stages;
    stages.prepare = [&](int p) { x.note(tag('P', p)); };
    stages.compute = [&](const ExpertGroups&) { x.note(tag('E', part++)); };
    stages.complete = [&](int p) { x.note(tag('F', p)); };
    parts.run(slot.data(), x, buf.data(), in.data(), out.data(), staging.data(), width, stages);
    EXPECT_EQ(x.log, expected_order(P)) << P << " parts";
    // The caller's local work: its first half while part 0's rows travel, its second while
    // the last part's results do, before any combine is waited for.
    x.reset(), part = 0;
    parts.plan(slot.data(), row_token.data(), row_of.data(), send_counts.data(), rows, rows, x);
    stages.local = logged_local_work(x);
    parts.run(slot.data(), x, buf.data(), in.data(), out.data(), staging.data(), width, stages);
    EXPECT_EQ(x.log, expected_order(P, true)) << P << " parts, local work";
  }
}

// Logs the rows each started dispatch and combine carries ("D0 4"), on top of the order.
class RowCountingExchange final : public moe_test::ForwardingExchange {
 public:
  std::vector<std::string> log;
  std::unique_ptr<PendingExchange> start_dispatch(float* dst, const float* src, float* staging,
                                                  const ExchangeCounts& c, int width) override {
    note('D', dispatches_++, c);
    return inner().start_dispatch(dst, src, staging, c, width);
  }
  std::unique_ptr<PendingExchange> start_combine(float* dst, const float* src, float* staging,
                                                 const ExchangeCounts& c, int width) override {
    note('C', combines_++, c);
    return inner().start_combine(dst, src, staging, c, width);
  }

 private:
  void note(char kind, int p, const ExchangeCounts& c) {
    int32_t rows = 0;
    for (int e = 0; e < c.per_rank; ++e) rows += c.send[e];
    log.push_back(tag(kind, p, " ") + std::to_string(rows));
  }
  int dispatches_ = 0, combines_ = 0;
};

// The two exchanges nothing of the layer hides, part 0's dispatch and the last part's
// combine, carry the small parts: rows 1 : 2 : .. : 2 : 1 with 3 parts or more (1/(2P-2)
// of the exchange exposed instead of 1/P), equal halves with 2. 24 tokens top-1 over 2
// experts.
TEST(MoePartsOrder, TheFirstDispatchAndTheLastCombineCarryTheSmallParts) {
  const int rows = 24, El = 2, k = 1, width = 4;
  std::vector<int32_t> row_token, row_of(rows);
  for (int e = 0; e < El; ++e)  // expert 0 the even tokens, expert 1 the odd ones
    for (int t = e; t < rows; t += El)
      row_of[size_t(t)] = int32_t(row_token.size()), row_token.push_back(t);
  const std::vector<int32_t> send_counts = {rows / El, rows / El};
  for (int P : {2, 3, 4, 5}) {
    SlotLayout layout;
    MoeParts parts(P, /*ranks=*/1, El, k, rows, layout);
    std::vector<float> slot(layout.total());
    RowCountingExchange x;
    parts.plan(slot.data(), row_token.data(), row_of.data(), send_counts.data(), rows, rows, x);
    std::vector<float> buf(rows * width), in(buf.size()), out(buf.size()), staging(buf.size());
    MoeParts::Stages stages;
    stages.prepare = stages.complete = [](int) {};
    stages.compute = [](const ExpertGroups&) {};
    parts.run(slot.data(), x, buf.data(), in.data(), out.data(), staging.data(), width, stages);
    const int unit = P == 2 ? rows / 2 : rows / (2 * P - 2);
    std::vector<std::string> want;
    for (int p = 0; p < P; ++p) {
      const int part_rows = (P > 2 && p > 0 && p + 1 < P ? 2 : 1) * unit;
      want.push_back(tag('D', p, " ") + std::to_string(part_rows));
      want.push_back(tag('C', p, " ") + std::to_string(part_rows));
    }
    std::vector<std::string> got = x.log;  // D0 D1 C0 D2 C1 ..: sorted as part by part
    std::stable_sort(got.begin(), got.end(), [](const std::string& a, const std::string& b) {
      return std::stoi(a.substr(1)) < std::stoi(b.substr(1));
    });
    EXPECT_EQ(got, want) << P << " parts";
  }
}

// The layer runs that pipeline in both passes: its forward and its backward input pass
// each post P dispatches and P combines in the same interleaving, and nothing blocking; and
// by the time the last combine is in, the earlier parts' tokens already hold their results
// (y in forward, dh in backward), the last part's not yet.
TEST(MoePartsOrder, ForwardAndBackwardBothPipelineTheirExchanges) {
  const int N = 12, C = 8, E = 2, P = 3;
  const ModelConfig cfg = moe_test::config(C, E, 1, 0.0f);
  LoggingExchange x;
  ExpertParallelShard ep{.rank = 0, .size = 1, .exchange = &x};
  ep.overlap_parts = P;
  moe_test::Harness m(cfg, ep, N);
  const auto h = moe_test::random_vec(size_t(N) * C, 3, 1);
  const auto dy = moe_test::random_vec(size_t(N) * C, 3, 2);
  const float unset = -1e30f;
  std::vector<float> y(h.size(), unset), dh(h.size(), unset);
  // Which tokens hold a result (not `unset`) when the last combine finishes.
  std::vector<float>* out = &y;
  std::vector<bool> done_at_last(N);
  x.on_log = [&](const std::string& line) {
    if (line != tag('C', P - 1, "-")) return;
    for (int t = 0; t < N; ++t) done_at_last[size_t(t)] = (*out)[size_t(t) * C] != unset;
  };
  std::vector<bool> want_done(N, true);
  SlotLayout sizes;  // the last part's first token, as the layer cuts the parts
  for (int t = MoeParts(P, 1, E, 1, N, sizes).token_begin(P - 1, N); t < N; ++t)
    want_done[size_t(t)] = false;
  m.layer->forward(m.slot(), h.data(), y.data(), N);
  EXPECT_EQ(x.log, exchanges_of(expected_order(P), true)) << "forward";
  EXPECT_EQ(done_at_last, want_done) << "forward";
  x.reset();
  out = &dh;
  m.layer->backward_input(m.slot(), h.data(), dy.data(), dh.data(), N);
  EXPECT_EQ(x.log, exchanges_of(expected_order(P), false)) << "backward";
  EXPECT_EQ(done_at_last, want_done) << "backward";
}

// The layer hands its caller's local work (the llama block's shared experts) to the
// pipeline in both passes; without parts, where the exchanges block, it runs after them.
TEST(MoePartsOrder, TheLayersLocalWorkRunsUnderTheFirstDispatchAndTheLastCombine) {
  const int N = 12, C = 8, E = 2;
  const ModelConfig cfg = moe_test::config(C, E, 1, 0.0f);
  const auto h = moe_test::random_vec(size_t(N) * C, 3, 1);
  const auto dy = moe_test::random_vec(size_t(N) * C, 3, 2);
  std::vector<float> y(h.size()), dh(h.size());
  for (int P : {1, 3}) {
    LoggingExchange x;
    ExpertParallelShard ep{.rank = 0, .size = 1, .exchange = &x};
    ep.overlap_parts = P;
    moe_test::Harness m(cfg, ep, N);
    const LocalWork local = logged_local_work(x);
    m.layer->forward(m.slot(), h.data(), y.data(), N, local);
    const std::vector<std::string> blocking = {"K blocking", "D blocking", "C blocking", "L1",
                                               "L2"};
    EXPECT_EQ(x.log, P == 1 ? blocking : exchanges_of(expected_order(P, true), true))
        << "forward, " << P << " parts";
    x.reset();
    m.layer->backward_input(m.slot(), h.data(), dy.data(), dh.data(), N, local);
    const std::vector<std::string> blocking_b(blocking.begin() + 1, blocking.end());
    EXPECT_EQ(x.log, P == 1 ? blocking_b : exchanges_of(expected_order(P, true), false))
        << "backward, " << P << " parts";
  }
}

// With expert_grads_in_b (ZeRO 0-1 and W right after B, train/session.cpp) the experts'
// weight gradients are accumulated while the last backward combine travels, in the one
// pass over every part that W would make: GEMM calls between the last combine's start and
// the first combine's finish (none there without it), fewer in W, and the same gradients
// bit for bit.
TEST(MoePartsOrder, ExpertWeightGradientsUnderTheLastBackwardCombine) {
  const int N = 12, C = 8, E = 2, P = 3;
  const ModelConfig cfg = moe_test::config(C, E, 1, 0.0f);
  const auto h = moe_test::random_vec(size_t(N) * C, 3, 1);
  const auto dy = moe_test::random_vec(size_t(N) * C, 3, 2);
  struct Run {
    uint64_t under_last_combine = 0, in_w = 0;
    std::vector<float> grads;
  };
  uint64_t version = 1;
  const auto run = [&](bool in_b, bool bf16) {
    LoggingExchange x;
    ExpertParallelShard ep{.rank = 0, .size = 1, .exchange = &x};
    ep.overlap_parts = P, ep.expert_grads_in_b = in_b;
    if (bf16) ep.bf16_version = &version;
    moe_test::Harness m(cfg, ep, N);
    std::vector<float> y(h.size()), dh(h.size());
    m.layer->forward(m.slot(), h.data(), y.data(), N);
    PhaseTotals totals;
    std::map<std::string, uint64_t> gemms_at;
    x.on_log = [&](const std::string& line) { gemms_at[line] = totals.calls[int(Phase::gemm)]; };
    attach_phase_totals(&totals);
    m.layer->backward_input(m.slot(), h.data(), dy.data(), dh.data(), N);
    const uint64_t after_b = totals.calls[int(Phase::gemm)];
    m.layer->backward_weight(m.slot(), h.data(), N);
    attach_phase_totals(nullptr);
    Run r;  // backward's exchanges are counted on from forward's P
    r.under_last_combine = gemms_at.at(tag('C', P, "-")) - gemms_at.at(tag('C', 2 * P - 1, "+"));
    r.in_w = totals.calls[int(Phase::gemm)] - after_b;
    r.grads.assign(m.grads.data(), m.grads.data() + m.grads.size());
    return r;
  };
  for (bool bf16 : {false, true}) {
    const Run in_w = run(false, bf16), in_b = run(true, bf16);
    EXPECT_EQ(in_w.under_last_combine, 0u) << "bf16 " << bf16;
    EXPECT_GT(in_b.under_last_combine, 0u) << "bf16 " << bf16;
    EXPECT_LT(in_b.in_w, in_w.in_w) << "bf16 " << bf16;
    EXPECT_EQ(in_b.grads, in_w.grads) << "bf16 " << bf16;
  }
}

// A small MoE model at ep 1 on ep.exchange, two sequences of cfg.seq tokens: the tokens and
// targets drawn from data_seed, the weights from init_seed.
struct TinyMoeModel {
  static constexpr int b = 2;
  ModelConfig cfg;
  std::vector<int> tokens, targets;
  std::unique_ptr<GPT> m;
  TinyMoeModel(const ModelConfig& c, const ExpertParallelShard& ep, int data_seed, int init_seed)
      : cfg(c) {
    for (int i = 0; i < b * cfg.seq; ++i) {
      tokens.push_back(int(uniform01(data_seed, 1, i) * cfg.vocab));
      targets.push_back(int(uniform01(data_seed, 2, i) * cfg.vocab));
    }
    m = std::make_unique<GPT>(cfg, GPT::whole_model(cfg), TensorParallelShard{}, b, ep);
    m->init(init_seed);
    m->zero_grads();
  }
  double step() { return m->train_microbatch(tokens.data(), targets.data(), b, cfg.seq, 0.1f); }
};

// Rank 0 of 1 on `x`, in `parts` parts.
ExpertParallelShard ep_one(TokenExchange* x, int parts, bool in_b = false) {
  ExpertParallelShard ep{.rank = 0, .size = 1, .exchange = x};
  ep.overlap_parts = parts, ep.expert_grads_in_b = in_b;
  return ep;
}

// A one-layer llama MoE model with a shared expert, at ep 1 on `x` in P parts (1: none).
struct SharedExpertModel : TinyMoeModel {
  static ModelConfig config() {
    ModelConfig cfg;
    cfg.arch = Arch::llama, cfg.layers = 1, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8;
    cfg.vocab = 11, cfg.experts = 4, cfg.topk = 2, cfg.expert_ffn_dim = 8;
    cfg.shared_experts = 1;
    return cfg;
  }
  SharedExpertModel(int P, TokenExchange* x) : TinyMoeModel(config(), ep_one(x, P), 4, 5) {}
};

// The llama block's shared expert is that local work: its GEMMs run while part 0's rows
// travel and while the last part's results do, in forward and in backward (the GEMM calls
// the phase profile counts between those lines of the exchange's log); and the model
// computes what it computes without parts.
TEST(MoePartsOrder, SharedExpertsRunWhileTheRoutedRowsTravel) {
  const int P = 2;
  LoggingExchange x;
  SharedExpertModel parted(P, &x), whole(1, nullptr);
  PhaseTotals totals;
  std::map<std::string, uint64_t> gemms_at;  // GEMM calls so far at each line
  x.on_log = [&](const std::string& line) { gemms_at[line] = totals.calls[int(Phase::gemm)]; };
  attach_phase_totals(&totals);
  const double loss = parted.step();
  attach_phase_totals(nullptr);
  const auto gemms = [&](const std::string& from, const std::string& to) {
    return gemms_at.at(to) - gemms_at.at(from);
  };
  // Forward: D0, C1 (the last combine). Backward: D2, C3 (its exchanges are counted on).
  EXPECT_GT(gemms("D0+", "D0-"), 0u) << "forward: the shared expert's gate/up under dispatch 0";
  EXPECT_GT(gemms("C1+", "C0-"), 0u) << "forward: its down_proj under the last combine";
  EXPECT_GT(gemms("D2+", "D2-"), 0u) << "backward: down_proj's input gradient under dispatch 0";
  EXPECT_GT(gemms("C3+", "C2-"), 0u) << "backward: gate/up's under the last combine";

  EXPECT_NEAR(loss, whole.step(), 1e-6 * std::fabs(loss));
  const float *ga = parted.m->grads().data(), *gb = whole.m->grads().data();
  ASSERT_EQ(parted.m->grads().size(), whole.m->grads().size());
  double d = 0, n = 0;
  for (size_t i = 0; i < whole.m->grads().size(); ++i)
    d += double(ga[i] - gb[i]) * (ga[i] - gb[i]), n += double(gb[i]) * gb[i];
  EXPECT_LE(std::sqrt(d / n), 1e-6);
}

// A two-block gpt2 MoE model at ep 1 on `x`, 3 parts; in_b: the trainer's expert_grads_in_b
// (ZeRO 0-1, W right after B), which lets each unit's W cover the next block's dispatch.
struct TwoBlockModel : TinyMoeModel {
  static ModelConfig config() {
    ModelConfig cfg;
    cfg.layers = 2, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 11;
    cfg.experts = 2, cfg.topk = 1;
    return cfg;
  }
  TwoBlockModel(bool in_b, TokenExchange* x) : TinyMoeModel(config(), ep_one(x, 3, in_b), 6, 7) {}
};

// The head's W runs while the top block's first backward dispatch travels, block 1's W
// while block 0's does (GEMM calls between those lines; none there without the cover), not
// before the rows leave; the same calls on the same buffers: every gradient bit for bit.
TEST(MoePartsOrder, TheUnitAbovesWeightGradientsCoverTheFirstBackwardDispatch) {
  const auto run = [](bool in_b, std::vector<float>& grads) {
    LoggingExchange x;
    TwoBlockModel model(in_b, &x);
    PhaseTotals totals;
    std::map<std::string, uint64_t> gemms_at;
    x.on_log = [&](const std::string& line) { gemms_at[line] = totals.calls[int(Phase::gemm)]; };
    attach_phase_totals(&totals);
    model.step();
    attach_phase_totals(nullptr);
    grads.assign(model.m->grads().data(), model.m->grads().data() + model.m->grads().size());
    // Forward: D0-D2 (block 0), D3-D5 (block 1); backward: D6 (block 1's first), D9.
    return std::pair(gemms_at.at("D6-") - gemms_at.at("D6+"),
                     gemms_at.at("D9-") - gemms_at.at("D9+"));
  };
  std::vector<float> covered, plain;
  const auto [head_w, block_w] = run(true, covered);
  const auto [none_1, none_0] = run(false, plain);
  EXPECT_GT(head_w, 0u) << "the head's W under block 1's first backward dispatch";
  EXPECT_GE(block_w, 2u) << "block 1's attention W under block 0's";
  EXPECT_EQ(none_1, 0u);
  EXPECT_EQ(none_0, 0u);
  EXPECT_EQ(covered, plain);
}

}  // namespace
}  // namespace mt
