// Test operands for flash attention: a problem (shape, positions, options) and its buffers,
// either one fused [q | k | v] buffer (rows of the qkv GEMM output, padded) or a q buffer and a
// [k | v] buffer (a ring step's visiting block), with the views the kernel takes.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include "kernels/flash_attention.h"
#include "kernels/kernel_harness.h"
#include "kernels/reference/flash_attention_ref.h"
#include "kernels/rope.h"

namespace mt::test {

inline std::vector<int> contiguous(int n, int first = 0) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Zigzag rank r of cp: chunks r and 2 cp - 1 - r of a T-token sequence (T / (2 cp) each).
inline std::vector<int> zigzag(int T, int cp, int r) {
  const int c = T / (2 * cp);
  std::vector<int> v = contiguous(c, r * c), tail = contiguous(c, (2 * cp - 1 - r) * c);
  v.insert(v.end(), tail.begin(), tail.end());
  return v;
}

// 0 .. n-1 in the order (t * step + 5) mod n (step coprime with n).
inline std::vector<int> shuffled(int n, int step) {
  std::vector<int> v(n);
  for (int t = 0; t < n; t++) v[t] = (t * step + 5) % n;
  return v;
}

struct FlashProblem {
  std::string name;
  int B = 1, H = 1, Hkv = 1, hd = 16;
  std::vector<int> qpos, kpos;
  bool rope = false, fused = false, portable = false;
  bool amx = true;  // false: the AVX512-BF16 tiles where AMX runs (FlashAttention::amx)
  FlashPrecision precision = FlashPrecision::fp32;
  // --dropout on the probabilities: p, the first head's global index, the sequence length
  // (0: the largest position + 1). Row i of sequence b is global token (b + 2) * seq + qpos[i].
  float dropout = 0;
  int head_offset = 0, seq_len = 0;
};

inline FlashProblem problem(std::string name, int B, int H, int Hkv, int hd, std::vector<int> qpos,
                            std::vector<int> kpos, bool rope, bool fused) {
  FlashProblem p;
  p.name = std::move(name);
  p.B = B, p.H = H, p.Hkv = Hkv, p.hd = hd;
  p.qpos = std::move(qpos), p.kpos = std::move(kpos);
  p.rope = rope, p.fused = fused;
  return p;
}

struct FlashSetup {
  FlashProblem p;
  RopeTable table;

  std::vector<int64_t> tokens;  // the query rows' global tokens (dropout)

  explicit FlashSetup(FlashProblem problem)
      : p(std::move(problem)), table(p.hd, max_position() + 1, 10000.0) {
    for (int b = 0; b < p.B; b++)
      for (int q : p.qpos) tokens.push_back(int64_t(b + 2) * seq_len() + q);
  }
  FlashSetup(const FlashSetup& o) : FlashSetup(o.p) {}

  int64_t seq_len() const { return p.seq_len > 0 ? p.seq_len : max_position() + 1; }
  // The dropout every call of the setup draws (seed 5, step 3, site 7).
  FlashDropout dropout() const {
    if (p.dropout == 0) return {};
    return {{5, 3, 7}, p.dropout, tokens.data(), p.head_offset, seq_len()};
  }

  int Tq() const { return int(p.qpos.size()); }
  int Tk() const { return int(p.kpos.size()); }
  int max_position() const {
    int m = 0;
    for (int x : p.qpos) m = x > m ? x : m;
    for (int x : p.kpos) m = x > m ? x : m;
    return m;
  }
  // Padded strides, so that no kernel can assume packed rows.
  size_t ldq() const { return size_t(p.H) * p.hd + (p.fused ? 2 * size_t(p.Hkv) * p.hd + 3 : 1); }
  size_t ldkv() const { return p.fused ? ldq() : 2 * size_t(p.Hkv) * p.hd + 2; }
  size_t ldo() const { return size_t(p.H) * p.hd + 2; }
  size_t out_size() const { return size_t(p.B) * Tq() * ldo(); }
  size_t lse_size() const { return size_t(p.B) * p.H * Tq(); }

  Bufs inputs(unsigned seed) const {
    Bufs in = {random_normal(size_t(p.B) * Tq() * ldq(), seed)};
    if (!p.fused) in.push_back(random_normal(size_t(p.B) * Tk() * ldkv(), seed + 1));
    return in;
  }

  FlashAttention args(const Bufs& in) const {
    FlashAttention a;
    a.B = p.B, a.Tq = Tq(), a.Tk = Tk(), a.H = p.H, a.Hkv = p.Hkv, a.hd = p.hd;
    const float* kv = p.fused ? in[0].data() + size_t(p.H) * p.hd : in[1].data();
    a.q = in[0].data(), a.k = kv, a.v = kv + size_t(p.Hkv) * p.hd;
    a.ldq = ldq(), a.ldk = a.ldv = ldkv();
    a.qpos = p.qpos.data(), a.kpos = p.kpos.data();
    a.rope = p.rope ? &table : nullptr;
    a.precision = p.precision, a.portable = p.portable, a.amx = p.amx;
    a.dropout = dropout();
    return a;
  }

  FlashGrads grads(Bufs& din) const {
    FlashGrads g;
    float* kv = p.fused ? din[0].data() + size_t(p.H) * p.hd : din[1].data();
    g.dq = din[0].data(), g.dk = kv, g.dv = kv + size_t(p.Hkv) * p.hd;
    g.lddq = ldq(), g.lddk = g.lddv = ldkv();
    return g;
  }
};

// The fast kernel or its reference twin on a setup's operands (scratch sized for the call).
inline void run_forward(Impl impl, const FlashSetup& s, const Bufs& in, Buf& out, Buf& lse,
                        bool accumulate = false) {
  const FlashAttention a = s.args(in);
  Buf scratch(impl == Impl::fast ? flash_attention_forward_scratch_floats(a) : 0);
  MT_DISPATCH(impl, flash_attention_forward, out.data(), s.ldo(), lse.data(), a, accumulate,
              scratch);
}

inline void run_backward(Impl impl, const FlashSetup& s, const Bufs& in, const Buf& out,
                         const Buf& lse, const Buf& dout, Bufs& din) {
  const FlashAttention a = s.args(in);
  Buf D(size_t(s.p.B) * s.p.H * s.Tq()), scratch;
  MT_DISPATCH(impl, flash_attention_backward_prep, D.data(), out.data(), s.ldo(), dout.data(),
              s.ldo(), s.p.B, s.Tq(), s.p.H, s.p.hd);
  if (impl == Impl::fast) scratch.resize(flash_attention_backward_scratch_floats(a));
  MT_DISPATCH(impl, flash_attention_backward, s.grads(din), dout.data(), s.ldo(), lse.data(),
              D.data(), a, scratch);
}

struct Result {
  Buf out, lse;
};

inline Result forward_fast(const FlashSetup& s, const Bufs& in) {
  Result r{Buf(s.out_size(), 0.0f), Buf(s.lse_size(), 0.0f)};
  run_forward(Impl::fast, s, in, r.out, r.lse);
  return r;
}

inline Bufs backward_fast(const FlashSetup& s, const Bufs& in, const Result& r, const Buf& dout) {
  Bufs din;
  for (const Buf& b : in) din.emplace_back(b.size(), 0.0f);
  run_backward(Impl::fast, s, in, r.out, r.lse, dout, din);
  return din;
}

}  // namespace mt::test
