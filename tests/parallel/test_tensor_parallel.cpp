// Tensor-parallel layers against their unsharded twins (tp = 1, no communication): the
// transformer block, a bare column-parallel -> row-parallel pair, the vocabulary-parallel
// embedding and the vocabulary-parallel LM head + cross-entropy, each with and without
// sequence parallelism, checked in forward, in the input-gradient half (B) and in the
// weight-gradient half (W). The communication regions are checked to be adjoint pairs, and
// the bytes each layer moves are checked against the Megatron formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "comm/world.h"
#include "core/arena.h"
#include "core/rng.h"
#include "model/gpt_block.h"
#include "model/embedding_layer.h"
#include "model/lm_head.h"
#include "tensor_parallel/column_parallel_linear.h"
#include "tensor_parallel/mappings.h"
#include "tensor_parallel/row_parallel_linear.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt {
namespace {

struct Case {
  int t;
  bool sp;
};

std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  return "tp" + std::to_string(i.param.t) + (i.param.sp ? "_sp" : "");
}

ModelConfig config(int vocab) {
  ModelConfig c;
  c.layers = 2, c.dim = 32, c.heads = 4, c.seq = 8, c.vocab = vocab;
  return c;
}

std::vector<float> random_vec(size_t n, uint64_t stream, float scale = 1.f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(scale * normal01(21, stream, i));
  return v;
}

// Every element a function of (tensor name, global index): the same model on every layout,
// with biases and LayerNorm gains far from their init so every path carries signal.
void fill_params(const ParamTable& table, float* params) {
  for (const ParamInfo& p : table.entries())
    p.for_each_element([&](size_t l, int64_t g) {
      params[p.offset + l] = float(0.3 * normal01(11, hash_name(p.name), uint64_t(g)));
    });
}

// What one rank computed, in the global view where possible.
struct RankResult {
  std::vector<float> out, dx;  // this rank's rows (all rows without sequence parallelism)
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;  // global shape, zeros off this rank
  // A copy: the rank's table dies with its thread, before the results are compared.
  std::map<std::string, ParamInfo> info;
  uint64_t bytes[3] = {0, 0, 0};  // tp traffic of forward, B, W
  bool padding_grads_zero = true;
};

void collect_grads(const ParamTable& table, const float* grads, RankResult& r) {
  for (const ParamInfo& p : table.entries()) {
    std::vector<float>& g = r.grads[p.name];
    g.assign(size_t(p.global_numel()), 0.f);
    p.for_each_element([&](size_t l, int64_t e) { g[size_t(e)] = grads[p.offset + l]; });
    r.info[p.name] = p;
  }
}

// Largest |a - b| relative to the largest |b|.
double rel_err(const float* a, const float* b, size_t n) {
  double d = 0, m = 1e-30;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return d / m;
}

// Runs fn on t ranks (a local world whose ranks form one tp group) or, with t == 1, once
// with no communicator; returns each rank's result.
template <typename Fn>
std::vector<RankResult> run_tp(int t, bool sp, Fn fn) {
  std::vector<RankResult> out(static_cast<size_t>(t));
  if (t == 1) {
    fn(TensorParallelShard{}, out[0]);
    return out;
  }
  run_local(t, WorldOptions{}, [&](CommWorld& w) {
    auto c = w.world();
    fn(TensorParallelShard{w.rank(), t, c.get(), sp}, out[size_t(w.rank())]);
  });
  return out;
}

// Checks the sharded ranks' weight gradients against the twin's: tp-split tensors are
// assembled from their owners, partial ones summed, replicated ones identical everywhere.
void expect_grads_match(const std::vector<RankResult>& ranks, const RankResult& twin, double tol) {
  for (const auto& [name, want] : twin.grads) {
    const ParamInfo& info = ranks[0].info.at(name);
    std::vector<float> got(want.size(), 0.f);
    for (const RankResult& r : ranks) {
      const std::vector<float>& g = r.grads.at(name);
      if (info.shard.replicated() && !info.tp_partial_grad) {
        EXPECT_EQ(g, ranks[0].grads.at(name)) << name << ": replicated gradient differs by rank";
        got = ranks[0].grads.at(name);
      } else {
        for (size_t i = 0; i < g.size(); ++i) got[i] += g[i];
      }
    }
    EXPECT_LT(rel_err(got.data(), want.data(), want.size()), tol) << name;
  }
}

// Rows [row0, row0 + n) of a (rows, C) buffer.
std::vector<float> rows_of(const std::vector<float>& full, size_t row0, size_t n, int C) {
  return {full.begin() + long(row0 * C), full.begin() + long((row0 + n) * C)};
}

class TensorParallelLayer : public ::testing::TestWithParam<Case> {};

// ---- transformer block ------------------------------------------------------------------

TEST_P(TensorParallelLayer, BlockMatchesUnshardedTwin) {
  const auto [t, sp] = GetParam();
  const ModelConfig cfg = config(64);
  const int b = 2, T = cfg.seq, C = cfg.dim, N = b * T;
  const std::vector<float> x = random_vec(size_t(N) * C, 1), dy = random_vec(size_t(N) * C, 2);

  auto body = [&](const TensorParallelShard& tp, RankResult& r) {
    ParamTable table;
    SlotLayout layout;
    GptBlock blk(1, cfg, tp, b, table, layout);
    Arena params(table.total()), grads(table.total()), slot(layout.total());
    Arena scratch(size_t(N) * C), att(blk.attention_scratch_floats());
    fill_params(table, params.data());
    blk.bind(params.data(), grads.data());
    blk.set_scratch(scratch.data());
    const bool local_rows = tp.size > 1 && tp.sequence_parallel;
    const size_t Nl = local_rows ? N / tp.size : N, row0 = local_rows ? tp.rank * Nl : 0;
    const std::vector<float> xl = rows_of(x, row0, Nl, C), dyl = rows_of(dy, row0, Nl, C);
    r.out.resize(Nl * C);
    r.dx.resize(Nl * C);
    auto bytes = [&] { return tp.comm ? tp.comm->stats().bytes_sent : 0; };
    uint64_t b0 = bytes();
    blk.forward(slot.data(), xl.data(), r.out.data(), b, T);
    uint64_t b1 = bytes();
    blk.backward_input(slot.data(), xl.data(), dyl.data(), r.dx.data(), att.data(), b, T);
    uint64_t b2 = bytes();
    blk.backward_weight(slot.data(), xl.data(), dyl.data(), b, T);
    uint64_t b3 = bytes();
    r.bytes[0] = b1 - b0, r.bytes[1] = b2 - b1, r.bytes[2] = b3 - b2;
    collect_grads(table, grads.data(), r);
  };
  const RankResult twin = run_tp(1, false, body)[0];
  const std::vector<RankResult> ranks = run_tp(t, sp, body);
  const size_t Nl = sp ? N / t : N;
  for (int r = 0; r < t; ++r) {
    const size_t row0 = sp ? r * Nl : 0;
    const auto want_out = rows_of(twin.out, row0, Nl, C), want_dx = rows_of(twin.dx, row0, Nl, C);
    EXPECT_LT(rel_err(ranks[r].out.data(), want_out.data(), want_out.size()), 1e-5) << "rank " << r;
    EXPECT_LT(rel_err(ranks[r].dx.data(), want_dx.data(), want_dx.size()), 1e-5) << "rank " << r;
  }
  expect_grads_match(ranks, twin, 1e-5);

  // Communication volume (bytes this rank sends): per block and microbatch Megatron's four
  // all-reduces of b*T*C floats, two in forward and two in backward, each 2(t-1)/t of its
  // size. Sequence parallelism moves the same volume as all-gathers + reduce-scatters, and
  // its W pass gathers again the four (b*T, C) inputs it keeps only locally.
  const uint64_t act = uint64_t(N) * C * sizeof(float);
  const uint64_t all_reduce = 2 * (t - 1) * act / t, all_gather = (t - 1) * act / t;
  for (const RankResult& r : ranks) {
    EXPECT_EQ(r.bytes[0], 2 * all_reduce);
    EXPECT_EQ(r.bytes[1], 2 * all_reduce);
    EXPECT_EQ(r.bytes[2], sp ? 4 * all_gather : 0);
  }
}

// ---- vocabulary-parallel embedding --------------------------------------------------------

TEST_P(TensorParallelLayer, EmbeddingMatchesUnshardedTwin) {
  const auto [t, sp] = GetParam();
  const ModelConfig cfg = config(61);  // prime: padded for every tp > 1
  const int b = 2, T = cfg.seq, C = cfg.dim, N = b * T;
  std::vector<int> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = int(uniform01(4, 4, i) * cfg.vocab);
  tokens[0] = cfg.vocab - 1;  // the last real id, next to the padding
  const std::vector<float> dy = random_vec(size_t(N) * C, 3);

  auto body = [&](const TensorParallelShard& tp, RankResult& r) {
    ParamTable table;
    EmbeddingLayer emb(cfg, tp, table);
    Arena params(table.total()), grads(table.total()), scratch(size_t(N) * C);
    fill_params(table, params.data());
    emb.bind(params.data(), grads.data());
    const bool local_rows = tp.size > 1 && tp.sequence_parallel;
    const size_t Nl = local_rows ? N / tp.size : N, row0 = local_rows ? tp.rank * Nl : 0;
    const std::vector<float> dyl = rows_of(dy, row0, Nl, C);
    r.out.resize(Nl * C);
    auto bytes = [&] { return tp.comm ? tp.comm->stats().bytes_sent : 0; };
    uint64_t b0 = bytes();
    emb.forward(r.out.data(), tokens.data(), b, T, scratch.data());
    uint64_t b1 = bytes();
    emb.backward_weight(dyl.data(), tokens.data(), b, T, scratch.data());
    r.bytes[0] = b1 - b0, r.bytes[2] = bytes() - b1;
    collect_grads(table, grads.data(), r);
  };
  const RankResult twin = run_tp(1, false, body)[0];
  const std::vector<RankResult> ranks = run_tp(t, sp, body);
  const size_t Nl = sp ? N / t : N;
  for (int r = 0; r < t; ++r) {
    // Each id has one owner and wpe is added once: bitwise the one-worker lookup.
    EXPECT_EQ(ranks[r].out, rows_of(twin.out, sp ? r * Nl : 0, Nl, C)) << "rank " << r;
  }
  expect_grads_match(ranks, twin, 1e-6);
  const uint64_t act = uint64_t(N) * C * sizeof(float);
  for (const RankResult& r : ranks) {
    EXPECT_EQ(r.bytes[0], sp ? (t - 1) * act / t : 2 * (t - 1) * act / t);
    EXPECT_EQ(r.bytes[2], sp ? (t - 1) * act / t : 0);
  }
}

// ---- vocabulary-parallel LM head and cross-entropy ----------------------------------------

TEST_P(TensorParallelLayer, HeadAndLossMatchUnshardedTwin) {
  const auto [t, sp] = GetParam();
  const ModelConfig cfg = config(61);
  const int b = 2, T = cfg.seq, C = cfg.dim, N = b * T;
  std::vector<int> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = int(uniform01(5, 5, i) * cfg.vocab);
  targets[1] = cfg.vocab - 1;
  const std::vector<float> x = random_vec(size_t(N) * C, 6);
  const float dloss = 1.f / float(N);

  auto body = [&](const TensorParallelShard& tp, RankResult& r) {
    ParamTable table;
    SlotLayout layout;
    LMHead head(cfg, tp, b, table, layout);
    Arena params(table.total()), grads(table.total()), slot(layout.total());
    Arena scratch(size_t(N) * C);
    fill_params(table, params.data());
    head.bind(params.data(), grads.data());
    head.set_scratch(scratch.data());
    const bool local_rows = tp.size > 1 && tp.sequence_parallel;
    const size_t Nl = local_rows ? N / tp.size : N, row0 = local_rows ? tp.rank * Nl : 0;
    const std::vector<float> xl = rows_of(x, row0, Nl, C);
    r.dx.resize(Nl * C);
    r.loss = head.forward(slot.data(), xl.data(), targets.data(), b, T, dloss);
    head.backward_input(slot.data(), xl.data(), r.dx.data(), b, T);
    head.backward_weight(slot.data(), xl.data(), b, T);
    collect_grads(table, grads.data(), r);
    // Padding rows of the local wte shard: no gradient, ever.
    const ParamInfo& wte = table.at("transformer.wte.weight");
    const tp::VocabShard s = tp::vocab_shard(cfg.vocab, tp.size, tp.rank);
    for (size_t i = size_t(s.real) * C; i < wte.numel; ++i)
      if (grads.data()[wte.offset + i] != 0.f) r.padding_grads_zero = false;
  };
  const RankResult twin = run_tp(1, false, body)[0];
  const std::vector<RankResult> ranks = run_tp(t, sp, body);
  const size_t Nl = sp ? N / t : N;
  for (int r = 0; r < t; ++r) {
    // Every rank computes the loss of every token; the padding never enters the softmax.
    EXPECT_NEAR(ranks[r].loss, twin.loss, 1e-5 * twin.loss) << "rank " << r;
    const auto want_dx = rows_of(twin.dx, sp ? r * Nl : 0, Nl, C);
    EXPECT_LT(rel_err(ranks[r].dx.data(), want_dx.data(), want_dx.size()), 1e-5) << "rank " << r;
    EXPECT_TRUE(ranks[r].padding_grads_zero) << "rank " << r;
  }
  expect_grads_match(ranks, twin, 1e-5);
}

// ---- column-parallel -> row-parallel pair ------------------------------------------------

// The Megatron MLP shape without the nonlinearity: h = x @ W1^T + b1 (column-parallel,
// W1 (H, C) split by rows), y = h @ W2^T + b2 (row-parallel, W2 (C, H) split by columns),
// against the same two layers on one worker, in forward, B and W.
TEST_P(TensorParallelLayer, ColumnThenRowMatchesUnshardedTwin) {
  const auto [t, sp] = GetParam();
  const int N = 16, C = 12, H = 20, Hl = H / t;
  const std::vector<float> x = random_vec(size_t(N) * C, 11), dy = random_vec(size_t(N) * C, 12);
  const std::vector<float> w1 = random_vec(size_t(H) * C, 13, 0.3f), b1 = random_vec(H, 14);
  const std::vector<float> w2 = random_vec(size_t(C) * H, 15, 0.3f), b2 = random_vec(C, 16);

  auto body = [&](const TensorParallelShard& tp, RankResult& r) {
    const int h = tp.size == 1 ? H : Hl, h0 = tp.rank * h;
    const int Nl = tp.splits_sequence() ? N / tp.size : N,
              n0 = tp.splits_sequence() ? tp.rank * Nl : 0;
    // This rank's slices: rows [h0, h0 + h) of W1 and b1, columns [h0, h0 + h) of W2.
    std::vector<float> w1l(w1.begin() + long(h0) * C, w1.begin() + long(h0 + h) * C);
    std::vector<float> b1l(b1.begin() + h0, b1.begin() + h0 + h), w2l(size_t(C) * h);
    for (int o = 0; o < C; ++o)
      for (int i = 0; i < h; ++i) w2l[size_t(o) * h + i] = w2[size_t(o) * H + h0 + i];
    std::vector<float> dw1(w1l.size()), db1(h), dw2(w2l.size()), db2(C);
    tp::ColumnParallelLinear col(tp, C, h);
    tp::RowParallelLinear row(tp, h, C);
    col.bind(w1l.data(), b1l.data(), dw1.data(), db1.data());
    row.bind(w2l.data(), b2.data(), dw2.data(), db2.data());

    std::vector<float> scratch(size_t(N) * std::max(C, H)), hid(size_t(N) * h), dh(hid.size());
    const std::vector<float> xl = rows_of(x, size_t(n0), size_t(Nl), C);
    const std::vector<float> dyl = rows_of(dy, size_t(n0), size_t(Nl), C);
    r.out.resize(size_t(Nl) * C), r.dx.resize(size_t(Nl) * C);
    col.forward(hid.data(), xl.data(), N, scratch.data());
    row.forward(r.out.data(), hid.data(), N, scratch.data());
    row.backward_input(dh.data(), dyl.data(), N, scratch.data());
    col.backward_input(r.dx.data(), dh.data(), N, scratch.data());
    row.backward_weight(dyl.data(), hid.data(), N, scratch.data());
    col.backward_weight(dh.data(), xl.data(), N, scratch.data());

    // Gradients in the global shape, zeros off this rank (b2 is replicated).
    auto& g1 = r.grads["w1"];
    g1.assign(w1.size(), 0.f);
    std::copy(dw1.begin(), dw1.end(), g1.begin() + long(h0) * C);
    auto& gb1 = r.grads["b1"];
    gb1.assign(b1.size(), 0.f);
    std::copy(db1.begin(), db1.end(), gb1.begin() + h0);
    auto& g2 = r.grads["w2"];
    g2.assign(w2.size(), 0.f);
    for (int o = 0; o < C; ++o)
      for (int i = 0; i < h; ++i) g2[size_t(o) * H + h0 + i] = dw2[size_t(o) * h + i];
    r.grads["b2"] = db2;
  };
  const RankResult twin = run_tp(1, false, body)[0];
  const std::vector<RankResult> ranks = run_tp(t, sp, body);
  const size_t Nl = sp ? N / t : N;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const size_t n0 = sp ? r * Nl : 0;
    const auto want_y = rows_of(twin.out, n0, Nl, C), want_dx = rows_of(twin.dx, n0, Nl, C);
    EXPECT_LT(rel_err(ranks[r].out.data(), want_y.data(), want_y.size()), 1e-5) << "rank " << r;
    EXPECT_LT(rel_err(ranks[r].dx.data(), want_dx.data(), want_dx.size()), 1e-5) << "rank " << r;
    EXPECT_EQ(ranks[r].grads.at("b2"), ranks[0].grads.at("b2")) << "replicated bias, rank " << r;
  }
  for (const char* name : {"w1", "b1", "w2"}) {
    std::vector<float> got(twin.grads.at(name).size(), 0.f);
    for (const RankResult& r : ranks)
      for (size_t i = 0; i < got.size(); ++i) got[i] += r.grads.at(name)[i];
    EXPECT_LT(rel_err(got.data(), twin.grads.at(name).data(), got.size()), 1e-5) << name;
  }
  const auto& db2 = twin.grads.at("b2");
  EXPECT_LT(rel_err(ranks[0].grads.at("b2").data(), db2.data(), db2.size()), 1e-5) << "b2";
}

INSTANTIATE_TEST_SUITE_P(Layouts, TensorParallelLayer,
                         ::testing::Values(Case{2, false}, Case{4, false}, Case{2, true},
                                           Case{4, true}),
                         case_name);

// ---- the regions are adjoint pairs --------------------------------------------------------

// <forward(x), y> summed over ranks equals <x, backward(y)> summed over ranks: what makes
// each backward the gradient of its forward.
TEST(TensorParallelRegions, BackwardIsTheAdjointOfForward) {
  const int t = 3;
  const size_t n = 5;  // rows of one rank (sequence parallelism); whole buffers are t*n
  std::vector<double> lhs(4, 0.0), rhs(4, 0.0);
  std::mutex mu;
  run_local(t, WorldOptions{}, [&](CommWorld& w) {
    Communicator* c = w.world().get();
    const uint64_t r = uint64_t(w.rank());
    auto dot = [](const std::vector<float>& a, const std::vector<float>& b) {
      double s = 0;
      for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
      return s;
    };
    double l[4], rr[4];
    {  // copy (identity) / all-reduce
      auto y = random_vec(t * n, 200 + r);
      tp::CopyToTensorParallel::forward();
      auto by = y;
      tp::CopyToTensorParallel::backward(c, by.data(), by.size());
      // The input is replicated: the adjoint is taken against rank 0's x on every rank.
      std::vector<float> x0 = random_vec(t * n, 100);
      l[0] = dot(x0, y), rr[0] = r == 0 ? dot(x0, by) : 0.0;
    }
    {  // all-reduce / identity: the output is replicated, compare with rank 0's y
      auto x = random_vec(t * n, 110 + r), y0 = random_vec(t * n, 210);
      auto fx = x;
      tp::ReduceFromTensorParallel::backward();
      tp::ReduceFromTensorParallel::forward(c, fx.data(), fx.size());
      l[1] = r == 0 ? dot(fx, y0) : 0.0, rr[1] = dot(x, y0);
    }
    {  // all-gather / reduce-scatter
      auto x = random_vec(n, 120 + r), y = random_vec(t * n, 220 + r);
      std::vector<float> fx(t * n), by(n);
      tp::GatherFromSequenceParallel::forward(c, x.data(), fx.data(), n);
      tp::GatherFromSequenceParallel::backward(c, y.data(), by.data(), n);
      l[2] = dot(fx, y), rr[2] = dot(x, by);
    }
    {  // reduce-scatter / all-gather
      auto x = random_vec(t * n, 130 + r), y = random_vec(n, 230 + r);
      std::vector<float> fx(n), by(t * n);
      tp::ScatterToSequenceParallel::forward(c, x.data(), fx.data(), n);
      tp::ScatterToSequenceParallel::backward(c, y.data(), by.data(), n);
      l[3] = dot(fx, y), rr[3] = dot(x, by);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (int k = 0; k < 4; ++k) lhs[k] += l[k], rhs[k] += rr[k];
  });
  for (int k = 0; k < 4; ++k)
    EXPECT_NEAR(lhs[k], rhs[k], 1e-4 * std::fabs(rhs[k])) << "region " << k;
}

TEST(VocabShard, PadsToAMultipleOfTp) {
  EXPECT_EQ(tp::padded_vocab(257, 4), 260);
  const tp::VocabShard last = tp::vocab_shard(257, 4, 3);
  EXPECT_EQ(last.start, 195);
  EXPECT_EQ(last.rows, 65);
  EXPECT_EQ(last.real, 62);
  // A rank may hold padding only (V = 5, t = 4: 2 rows each, rank 3 starts at 6).
  EXPECT_EQ(tp::vocab_shard(5, 4, 3).real, 0);
  EXPECT_EQ(tp::vocab_shard(256, 2, 1).real, 128);
}

}  // namespace
}  // namespace mt
