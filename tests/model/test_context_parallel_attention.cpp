// Attention across the context-parallel group (model/context_parallel_attention.h) against
// one flash call over the whole sequence: every rank's rows of the output, the log-sum-exp
// and the three gradients, per element, for N = 2, 3, 4 ranks, ring and all-gather, with
// GQA and RoPE at the true positions.
//
// K and V differ strongly from chunk to chunk (an offset and a scale per chunk), so a ring
// that attended to or differentiated against any other block than the one it holds at a step
// (the first one, say, in backward) misses the reference by far more than the tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/context_parallel_attention.h"
#include "model/zigzag_layout.h"

namespace mt {
namespace {

struct Shape {
  int B = 2, T = 48, H = 4, Hkv = 2, hd = 16;
  int qc() const { return H * hd; }
  int kc() const { return Hkv * hd; }
};

std::vector<float> random_rows(int rows, int cols, uint64_t seed, const Shape& s, int N,
                               bool per_chunk) {
  std::vector<float> x(size_t(rows) * cols);
  const int chunk = s.T / (2 * N);
  for (int i = 0; i < rows; ++i) {
    const int c = (i % s.T) / chunk;  // the chunk of the row's position
    const float scale = per_chunk ? 1.0f + 0.5f * c : 1.0f;
    const float offset = per_chunk ? 0.7f * float(c % 3) - 0.7f : 0.0f;
    for (int j = 0; j < cols; ++j)
      x[size_t(i) * cols + j] = scale * float(normal01(seed, 0, size_t(i) * cols + j)) + offset;
  }
  return x;
}

// Rows of x (B sequences of T rows) at the positions, per sequence.
std::vector<float> take_rows(const std::vector<float>& x, int cols, const Shape& s,
                             const std::vector<int>& pos) {
  std::vector<float> out;
  for (int b = 0; b < s.B; ++b)
    for (int p : pos) {
      const float* row = x.data() + (size_t(b) * s.T + p) * cols;
      out.insert(out.end(), row, row + cols);
    }
  return out;
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
};

FlashAttention args(const Shape& s, int T, const float* q, const float* k, const float* v,
                    const int* pos, const RopeTable* rope) {
  FlashAttention a;
  a.B = s.B, a.Tq = a.Tk = T, a.H = s.H, a.Hkv = s.Hkv, a.hd = s.hd;
  a.q = q, a.k = k, a.v = v;
  a.ldq = size_t(s.qc()), a.ldk = a.ldv = size_t(s.kc());
  a.qpos = a.kpos = pos;
  a.rope = rope;
  return a;
}

// Forward then backward of a (T rows per sequence), through cp when given.
Result run(const FlashAttention& a, const Shape& s, const std::vector<float>& dout,
           ContextParallelAttention* cp) {
  const int T = a.Tq;
  Result r;
  r.out.assign(size_t(s.B) * T * s.qc(), 0), r.lse.assign(size_t(s.B) * s.H * T, 0);
  r.dq.assign(r.out.size(), 0), r.dk.assign(size_t(s.B) * T * s.kc(), 0), r.dv = r.dk;
  std::vector<float> fs(flash_attention_forward_scratch_floats(a));
  std::vector<float> bs(flash_attention_backward_scratch_floats(a)), D(r.lse.size());
  if (cp)
    cp->forward(r.out.data(), s.qc(), r.lse.data(), a, fs);
  else
    flash_attention_forward(r.out.data(), s.qc(), r.lse.data(), a, false, fs);
  flash_attention_backward_prep(D.data(), r.out.data(), s.qc(), dout.data(), s.qc(), s.B, T, s.H,
                                s.hd);
  const FlashGrads g{r.dq.data(),    r.dk.data(),    r.dv.data(),
                     size_t(s.qc()), size_t(s.kc()), size_t(s.kc())};
  if (cp)
    cp->backward(g, dout.data(), s.qc(), r.lse.data(), D.data(), a, bs);
  else
    flash_attention_backward(g, dout.data(), s.qc(), r.lse.data(), D.data(), a, bs);
  return r;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                 int rank) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::fabs(got[i] - want[i]) <= 2e-4f * (1.0f + std::fabs(want[i])))) {
      ADD_FAILURE() << what << " rank " << rank << " [" << i << "]: " << got[i] << " vs "
                    << want[i];
      ++bad;
    }
}

// The reference's lse (B, H, T) at the rank's positions.
std::vector<float> take_lse(const std::vector<float>& lse, const Shape& s,
                            const std::vector<int>& pos) {
  std::vector<float> out;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int p : pos) out.push_back(lse[(size_t(b) * s.H + h) * s.T + p]);
  return out;
}

void check_against_one_worker(int N, CpComm mode) {
  const Shape s;
  const RopeTable rope(s.hd, s.T, 10000.0);
  const auto q = random_rows(s.B * s.T, s.qc(), 1, s, N, false);
  const auto k = random_rows(s.B * s.T, s.kc(), 2, s, N, true);
  const auto v = random_rows(s.B * s.T, s.kc(), 3, s, N, true);
  const auto dout = random_rows(s.B * s.T, s.qc(), 4, s, N, false);
  std::vector<int> all(size_t(s.T));
  for (int t = 0; t < s.T; ++t) all[size_t(t)] = t;
  const Result ref =
      run(args(s, s.T, q.data(), k.data(), v.data(), all.data(), &rope), s, dout, nullptr);

  run_local(N, WorldOptions{}, [&](CommWorld& w) {
    const int r = w.rank(), Tl = s.T / N;
    const std::vector<int> pos = zigzag_positions(s.T, N, r);
    ContextParallelAttention cp(ContextParallelShard{r, N, w.world().get(), mode}, s.T,
                                size_t(s.B) * Tl, s.kc());
    ASSERT_EQ(std::vector<int>(cp.positions(), cp.positions() + Tl), pos);
    const auto ql = take_rows(q, s.qc(), s, pos), kl = take_rows(k, s.kc(), s, pos);
    const auto vl = take_rows(v, s.kc(), s, pos), dl = take_rows(dout, s.qc(), s, pos);
    const Result got =
        run(args(s, Tl, ql.data(), kl.data(), vl.data(), cp.positions(), &rope), s, dl, &cp);
    expect_near(got.out, take_rows(ref.out, s.qc(), s, pos), "out", r);
    expect_near(got.lse, take_lse(ref.lse, s, pos), "lse", r);
    expect_near(got.dq, take_rows(ref.dq, s.qc(), s, pos), "dq", r);
    expect_near(got.dk, take_rows(ref.dk, s.kc(), s, pos), "dk", r);
    expect_near(got.dv, take_rows(ref.dv, s.kc(), s, pos), "dv", r);
  });
}

TEST(ContextParallelAttention, RingEqualsOneWorker) {
  for (int N : {2, 3, 4}) check_against_one_worker(N, CpComm::ring);
}

TEST(ContextParallelAttention, AllGatherEqualsOneWorker) {
  for (int N : {2, 4}) check_against_one_worker(N, CpComm::allgather);
}

// Rank 1 finishes the forward ring, then fails instead of running the backward: ranks 0
// and 2 are inside the backward ring, waiting for blocks and gradients rank 1 will never
// send. The job ends (the local world wakes their waits) with rank 1's failure.
TEST(ContextParallelAttention, ARankFailingMidRingEndsTheJobNamingIt) {
  const Shape s;
  const int N = 3, Tl = s.T / N;
  const RopeTable rope(s.hd, s.T, 10000.0);
  WorldOptions opts;
  opts.timeout_s = 60;  // a hang would fail on the timeout, not pass
  try {
    run_local(N, opts, [&](CommWorld& w) {
      const int r = w.rank();
      ContextParallelAttention cp(ContextParallelShard{r, N, w.world().get(), CpComm::ring}, s.T,
                                  size_t(s.B) * Tl, s.kc());
      const auto q = random_rows(s.B * Tl, s.qc(), 10 + r, s, N, false);
      const auto kv = random_rows(s.B * Tl, s.kc(), 20 + r, s, N, true);
      const FlashAttention a = args(s, Tl, q.data(), kv.data(), kv.data(), cp.positions(), &rope);
      std::vector<float> out(q.size()), lse(size_t(s.B) * s.H * Tl);
      std::vector<float> fs(flash_attention_forward_scratch_floats(a));
      cp.forward(out.data(), s.qc(), lse.data(), a, fs);
      if (r == 1) throw RuntimeError("rank 1: injected fault in the ring");
      std::vector<float> D(lse.size()), dq(q.size()), dkv(kv.size()),
          bs(flash_attention_backward_scratch_floats(a));
      const FlashGrads g{dq.data(),      dkv.data(),     dkv.data(),
                         size_t(s.qc()), size_t(s.kc()), size_t(s.kc())};
      cp.backward(g, q.data(), s.qc(), lse.data(), D.data(), a, bs);
    });
    FAIL() << "the job did not fail";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mt
