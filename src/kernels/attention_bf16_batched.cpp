// The AMX attention core (attention_bf16_batched.h): per sequence, pack its heads to bf16,
// run the products as batched oneDNN matmuls over the heads, the softmax (backward) per row
// in between.
#include "kernels/attention_bf16_batched.h"

#if defined(__AVX512F__)
#include <oneapi/dnnl/dnnl.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kernels/attention_avx512_tiles.h"
#include "kernels/matmul_bf16.h"
#include "kernels/vec_math.h"
#endif

namespace mt {

#if defined(__AVX512F__)
namespace {

using attention_avx512::KernelHeadDims;
using dnnl::memory;

// C (n, M, N) fp32 dense = A (n, M, K) B (n, K, N), A and B bf16 with any strides
// (batch, row, column), which is how the transposed operands (k in q k^T, dS and P in the
// key-side products) are read without a copy. (Packing k transposed instead, so that oneDNN
// reads a plain B, measured slower: the scatter cost more than oneDNN's own copy.)
struct BatchedShape {
  int64_t n, M, N, K;
  int64_t a_bs, a_rs, a_cs, b_bs, b_rs, b_cs;
  auto key() const { return std::tie(n, M, N, K, a_bs, a_rs, a_cs, b_bs, b_rs, b_cs); }
  bool operator<(const BatchedShape& o) const { return key() < o.key(); }
};

// (NH, T, T) = x (NH, T, hd) y (NH, T, hd)^T: scores (x q, y k) and dP (x dout, y v).
BatchedShape scores_shape(int NH, int T, int hd) {
  const int64_t hs = int64_t(T) * hd;
  return {NH, T, T, hd, hs, hd, 1, hs, 1, hd};
}
// (NH, T, hd) = a (NH, T, T) y (NH, T, hd), a read as stored (P v, dS k) or transposed
// (dS^T q, P^T dout).
BatchedShape rows_shape(int NH, int T, int hd, bool transposed) {
  const int64_t hs = int64_t(T) * hd, ts = int64_t(T) * T;
  return transposed ? BatchedShape{NH, T, hd, T, ts, 1, T, hs, hd, 1}
                    : BatchedShape{NH, T, hd, T, ts, T, 1, hs, hd, 1};
}

struct BatchedGemm {
  dnnl::matmul prim;
  memory::desc a, b, c;
  std::vector<uint8_t> scratchpad;  // user-managed: this thread's alone
};

// Primitives per shape and thread, as matmul_bf16.cpp keeps them: creation costs far more
// than one product, and a per-thread cache needs no lock. Built inside the OpenMP loop over
// sequences, they run single-threaded.
struct BatchedContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<BatchedShape, BatchedGemm> cache;
};

BatchedContext& batched_context() {
  thread_local BatchedContext ctx;
  return ctx;
}

BatchedGemm make_batched(BatchedContext& ctx, const BatchedShape& s) {
  BatchedGemm g;
  g.a = memory::desc({s.n, s.M, s.K}, memory::data_type::bf16, {s.a_bs, s.a_rs, s.a_cs});
  g.b = memory::desc({s.n, s.K, s.N}, memory::data_type::bf16, {s.b_bs, s.b_rs, s.b_cs});
  g.c = memory::desc({s.n, s.M, s.N}, memory::data_type::f32, {s.M * s.N, s.N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(g.a, g.b, g.c), attr, ctx.engine);
  g.scratchpad.resize(pd.scratchpad_desc().get_size());
  g.prim = dnnl::matmul(pd);
  return g;
}

void run_batched(const BatchedShape& s, const bf16* A, const bf16* B, float* C) {
  BatchedContext& ctx = batched_context();
  auto it = ctx.cache.find(s);
  if (it == ctx.cache.end()) {
    try {
      it = ctx.cache.emplace(s, make_batched(ctx, s)).first;
    } catch (const dnnl::error& e) {
      MT_CHECK(false, "oneDNN batched bf16 matmul (", s.n, " x ", s.M, "x", s.N, "x", s.K,
               ") could not be created: ", e.what());
    }
  }
  BatchedGemm& g = it->second;
  memory pad(memory::desc({int64_t(g.scratchpad.size())}, memory::data_type::u8, {1}), ctx.engine,
             g.scratchpad.data());
  g.prim.execute(ctx.stream, {{DNNL_ARG_SRC, memory(g.a, ctx.engine, const_cast<bf16*>(A))},
                              {DNNL_ARG_WEIGHTS, memory(g.b, ctx.engine, const_cast<bf16*>(B))},
                              {DNNL_ARG_DST, memory(g.c, ctx.engine, C)},
                              {DNNL_ARG_SCRATCHPAD, pad}});
  ctx.stream.wait();
}

// Per-thread buffers of one sequence, grown to the largest seen (no allocation once the
// sizes are known): its heads' operands in bf16 (NH, T, hd), P and dS in bf16 (NH, T, T),
// the products' fp32 results (NH, T, hd).
struct SequenceScratch {
  std::vector<bf16> q, k, v, g, p, ds;
  std::vector<float> o1, o2, o3;
  template <typename V>
  static auto* sized(V& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
  }
};

SequenceScratch& sequence_scratch() {
  thread_local SequenceScratch s;
  return s;
}

// n floats -> bf16 as to_bf16 rounds them.
void round_row(bf16* dst, const float* src, int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j),
                        round_bf16x16(_mm512_loadu_ps(src + j)));
  for (; j < n; ++j) dst[j] = float_to_bf16(src[j]);
}

// dst (NH, T, hd) bf16 = the heads of the (T, ld) rows at src (head h at column h * hd).
void pack_heads(bf16* dst, const float* src, int ld, int NH, int T, int hd) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NH; ++h)
      round_row(dst + (size_t(h) * T + t) * hd, src + size_t(t) * ld + size_t(h) * hd, hd);
}

// The (T, ld) rows at dst, head h at column h * hd, (+)= src (NH, T, hd): added when
// accumulating into floats, else overwritten (bf16: rounded as to_bf16 rounds).
template <typename OutT>
void store_heads(OutT* dst, int ld, const float* src, int NH, int T, int hd, bool accumulate) {
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NH; ++h) {
      const float* s = src + (size_t(h) * T + t) * hd;
      OutT* o = dst + size_t(t) * ld + size_t(h) * hd;
      if constexpr (std::is_same_v<OutT, float>) {
        if (accumulate)
          for (int d = 0; d < hd; ++d) o[d] += s[d];
        else
          for (int d = 0; d < hd; ++d) o[d] = s[d];
      } else {
        round_row(o, s, hd);
      }
    }
}

// THE point where the bf16 probabilities that multiply v (forward) and dout (dv) are formed
// from the fp32 ones, for row i of a head (columns past i are zeros in `att`): the forward
// and the backward both call it, so a change here (e.g. a dropout mask drawn from the
// row's position) reaches both products alike.
void probabilities_to_bf16(bf16* p16, const float* att_row, int /*i*/, int T) {
  round_row(p16, att_row, T);
}

// One sequence: att (NH, T, T), out rows (T, ldo).
template <typename OutT>
void forward_sequence(OutT* out, int ldo, float* att, const float* qkv, int T, int C, int NH) {
  const int hd = C / NH;
  const size_t hs = size_t(NH) * T * hd, ts = size_t(NH) * T * T;
  SequenceScratch& sc = sequence_scratch();
  bf16 *q = SequenceScratch::sized(sc.q, hs), *k = SequenceScratch::sized(sc.k, hs),
       *v = SequenceScratch::sized(sc.v, hs), *p = SequenceScratch::sized(sc.p, ts);
  float* o = SequenceScratch::sized(sc.o1, hs);
  // Phase 1: the heads' operands in bf16.
  pack_heads(q, qkv, 3 * C, NH, T, hd);
  pack_heads(k, qkv + C, 3 * C, NH, T, hd);
  pack_heads(v, qkv + 2 * C, 3 * C, NH, T, hd);
  // Phase 2: scores, then the scale, the causal softmax in place and P in bf16.
  run_batched(scores_shape(NH, T, hd), q, k, att);
  const __m512 scale = _mm512_set1_ps(1.0f / std::sqrt(float(hd)));
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      float* row = att + (size_t(h) * T + i) * T;
      // Only the causal columns are read: the rest is zeroed by the softmax.
      for (int j = 0; j <= i; j += 16) {
        const __mmask16 m = attention_avx512::tail_mask(i + 1 - j);
        _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(scale, _mm512_maskz_loadu_ps(m, row + j)));
      }
      attention_avx512::softmax_causal_row(row, i, T);
      probabilities_to_bf16(p + (size_t(h) * T + i) * T, row, i, T);
    }
  // Phase 3: out = P v.
  run_batched(rows_shape(NH, T, hd, false), p, v, o);
  store_heads(out, ldo, o, NH, T, hd, false);
}

// One sequence's gradients: dqkv rows (T, 3C); d (NH, T, T) scratch.
template <typename OutT>
void backward_sequence(OutT* dqkv, float* d, const float* dout, const float* qkv, const float* att,
                       int T, int C, int NH, bool accumulate) {
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(float(hd));
  const size_t hs = size_t(NH) * T * hd, ts = size_t(NH) * T * T;
  SequenceScratch& sc = sequence_scratch();
  bf16 *q = SequenceScratch::sized(sc.q, hs), *k = SequenceScratch::sized(sc.k, hs),
       *v = SequenceScratch::sized(sc.v, hs), *g = SequenceScratch::sized(sc.g, hs),
       *p = SequenceScratch::sized(sc.p, ts), *ds = SequenceScratch::sized(sc.ds, ts);
  float *dq = SequenceScratch::sized(sc.o1, hs), *dk = SequenceScratch::sized(sc.o2, hs),
        *dv = SequenceScratch::sized(sc.o3, hs);
  // Phase 1: operands in bf16.
  pack_heads(q, qkv, 3 * C, NH, T, hd);
  pack_heads(k, qkv + C, 3 * C, NH, T, hd);
  pack_heads(v, qkv + 2 * C, 3 * C, NH, T, hd);
  pack_heads(g, dout, C, NH, T, hd);
  // Phase 2: dP = dout v^T, then dS = scale P (dP - rowsum(P dP)) in place; both in bf16.
  run_batched(scores_shape(NH, T, hd), g, v, d);
  for (int h = 0; h < NH; ++h)
    for (int i = 0; i < T; ++i) {
      const size_t r = (size_t(h) * T + i) * T;
      attention_avx512::softmax_backward_row<true>(d + r, att + r, i, T, scale);
      round_row(ds + r, d + r, T);
      probabilities_to_bf16(p + r, att + r, i, T);
    }
  // Phase 3: dq = dS k, dk = dS^T q, dv = P^T dout.
  run_batched(rows_shape(NH, T, hd, false), ds, k, dq);
  run_batched(rows_shape(NH, T, hd, true), ds, q, dk);
  run_batched(rows_shape(NH, T, hd, true), p, g, dv);
  store_heads(dqkv, 3 * C, dq, NH, T, hd, accumulate);
  store_heads(dqkv + C, 3 * C, dk, NH, T, hd, accumulate);
  store_heads(dqkv + 2 * C, 3 * C, dv, NH, T, hd, accumulate);
}

template <typename OutT>
void forward_all(OutT* out, float* att, const float* qkv, int B, int T, int C, int NH) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b)
    forward_sequence(out + size_t(b) * T * C, C, att + size_t(b) * NH * T * T,
                     qkv + size_t(b) * T * 3 * C, T, C, NH);
}

template <typename OutT>
void backward_all(OutT* dqkv, float* scratch, const float* dout, const float* qkv, const float* att,
                  int B, int T, int C, int NH, bool accumulate) {
#pragma omp parallel for schedule(static)
  for (int b = 0; b < B; ++b) {
    const size_t ts = size_t(b) * NH * T * T;
    backward_sequence(dqkv + size_t(b) * T * 3 * C, scratch + ts, dout + size_t(b) * T * C,
                      qkv + size_t(b) * T * 3 * C, att + ts, T, C, NH, accumulate);
  }
}

// Whether the bf16 GEMMs run on AMX tiles now (a ScopedBf16GemmPath may move them to the
// jit_gemm routine, which has no AMX kernel; then so does the attention core).
bool bf16_gemms_on_amx() {
  static const bool amx_primitive = matmul_bf16_isa().find("amx") != std::string::npos;
  return amx_primitive && matmul_bf16_path() == Bf16GemmPath::primitive;
}

}  // namespace

bool attention_bf16_batched_supports(int hd) {
  // Head dims 64 and 128 only: at 32 (and 16) the score products are one 32-deep tile step,
  // and oneDNN's per-head set-up outweighs them. Measured (thread CPU time, same process,
  // B 8, NH 8, 1 thread, forward / backward ms): hd 32 T 128: 2.03 / 2.92 here against
  // 1.71 / 2.89 for the AVX512-BF16 kernel, T 256: 7.01 / 10.7 against 5.81 / 11.2; hd 64
  // T 128: 2.68 / 4.36 against 2.82 / 4.81, T 256: 7.42 / 12.2 against 8.91 / 19.2, T 512:
  // 35.1 / 47.5 against 35.2 / 72.2.
  return (hd == 64 || hd == 128) && KernelHeadDims::supports(hd) && bf16_gemms_on_amx();
}

void attention_forward_bf16_batched(float* out, float* att, const float* qkv, int B, int T, int C,
                                    int NH) {
  forward_all(out, att, qkv, B, T, C, NH);
}

void attention_forward_bf16_batched(bf16* out, float* att, const float* qkv, int B, int T, int C,
                                    int NH) {
  forward_all(out, att, qkv, B, T, C, NH);
}

void attention_backward_bf16_batched(float* dqkv, float* scratch, const float* dout,
                                     const float* qkv, const float* att, int B, int T, int C,
                                     int NH, bool accumulate) {
  backward_all(dqkv, scratch, dout, qkv, att, B, T, C, NH, accumulate);
}

void attention_backward_bf16_batched(bf16* dqkv, float* scratch, const float* dout,
                                     const float* qkv, const float* att, int B, int T, int C,
                                     int NH) {
  backward_all(dqkv, scratch, dout, qkv, att, B, T, C, NH, false);
}

#else  // no AVX-512: attention.cpp takes the other paths

bool attention_bf16_batched_supports(int) {
  return false;
}
void attention_forward_bf16_batched(float*, float*, const float*, int, int, int, int) {}
void attention_forward_bf16_batched(bf16*, float*, const float*, int, int, int, int) {}
void attention_backward_bf16_batched(float*, float*, const float*, const float*, const float*, int,
                                     int, int, int, bool) {}
void attention_backward_bf16_batched(bf16*, float*, const float*, const float*, const float*, int,
                                     int, int, int) {}

#endif

}  // namespace mt
