#include "kernels/gelu.h"
#include "kernels/phase_profile.h"

#include <algorithm>

#include "kernels/bf16_row_store.h"
#include "kernels/vec_math.h"

namespace mt {

// 0.5 (1 + tanh(u)) equals sigmoid(2u), so gelu(x) = x / (1 + exp(-2u)): one exp, no
// cancellation for small u (1 - 2/(e^2u + 1) loses all digits there), and it vectorises.
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

inline float gelu_one(float x) {
  float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return x / (1.0f + exp_vec(-2.0f * u));
}

inline float gelu_grad(float x) {
  float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  float s = 1.0f / (1.0f + exp_vec(-2.0f * u));
  float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

#if defined(__AVX512F__)
// Hand-vectorised 16-lane forms: the compiler's version of the loops above divides with
// vdivps, which is slow on Zen 4, and keeps masked epilogues in the hot loop. 1/d is a
// rcp14 estimate refined by one Newton step (relative error ~2^-27, below float rounding).
inline __m512 reciprocal16(__m512 d) {
  const __m512 r = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

// sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3), given x and x^2.
inline __m512 sigmoid_2u16(__m512 x, __m512 x2) {
  const __m512 minus_2u =
      _mm512_mul_ps(x, _mm512_fmadd_ps(x2, _mm512_set1_ps(-2.0f * kSqrt2OverPi * kCubic),
                                       _mm512_set1_ps(-2.0f * kSqrt2OverPi)));
  return reciprocal16(_mm512_add_ps(_mm512_set1_ps(1.0f), exp_vec512(minus_2u)));
}

using bf16_rows::store_bf16_tail;
using bf16_rows::store_row_bf16;
using bf16_rows::tail_mask;

inline __m512 gelu16(__m512 x) {
  return _mm512_mul_ps(x, sigmoid_2u16(x, _mm512_mul_ps(x, x)));
}

inline __m512 gelu_grad16(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 s = sigmoid_2u16(x, x2);
  const __m512 du = _mm512_fmadd_ps(x2, _mm512_set1_ps(3.0f * kSqrt2OverPi * kCubic),
                                    _mm512_set1_ps(kSqrt2OverPi));
  const __m512 two_x_du = _mm512_mul_ps(_mm512_add_ps(x, x), du);
  return _mm512_fmadd_ps(_mm512_mul_ps(s, _mm512_sub_ps(_mm512_set1_ps(1.0f), s)), two_x_du, s);
}

#endif
}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {
  PhaseScope phase_scope(Phase::activation, 0, 8.0 * double(n));
  long long count = static_cast<long long>(n);
#if defined(__AVX512F__)
  const long long vecs = count / 16;
#pragma omp parallel for schedule(static)
  for (long long b = 0; b < vecs; b++)
    _mm512_storeu_ps(out + 16 * b, gelu16(_mm512_loadu_ps(inp + 16 * b)));
  if (const __mmask16 m = tail_mask(count - 16 * vecs))
    _mm512_mask_storeu_ps(out + 16 * vecs, m, gelu16(_mm512_maskz_loadu_ps(m, inp + 16 * vecs)));
#else
#pragma omp parallel for simd schedule(static)
  for (long long i = 0; i < count; i++) out[i] = gelu_one(inp[i]);
#endif
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  PhaseScope phase_scope(Phase::activation, 0, 12.0 * double(n));
  // d/dx = s + x s (1 - s) * 2 u'(x) with s = sigmoid(2u), using 1 - tanh^2 = 4 s (1 - s).
  long long count = static_cast<long long>(n);
#if defined(__AVX512F__)
  const bool overwrite = dinp == dout;
  const long long vecs = count / 16;
#pragma omp parallel for schedule(static)
  for (long long b = 0; b < vecs; b++) {
    const __m512 g =
        _mm512_mul_ps(gelu_grad16(_mm512_loadu_ps(inp + 16 * b)), _mm512_loadu_ps(dout + 16 * b));
    _mm512_storeu_ps(dinp + 16 * b,
                     overwrite ? g : _mm512_add_ps(_mm512_loadu_ps(dinp + 16 * b), g));
  }
  if (const __mmask16 m = tail_mask(count - 16 * vecs)) {
    const size_t o = size_t(16 * vecs);
    const __m512 g = _mm512_mul_ps(gelu_grad16(_mm512_maskz_loadu_ps(m, inp + o)),
                                   _mm512_maskz_loadu_ps(m, dout + o));
    _mm512_mask_storeu_ps(dinp + o, m,
                          overwrite ? g : _mm512_add_ps(_mm512_maskz_loadu_ps(m, dinp + o), g));
  }
#else
  // Two loops rather than a select on dinp == dout, which GCC will not vectorise.
  if (dinp == dout) {
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < count; i++) dinp[i] = gelu_grad(inp[i]) * dout[i];
  } else {
#pragma omp parallel for simd schedule(static)
    for (long long i = 0; i < count; i++) dinp[i] += gelu_grad(inp[i]) * dout[i];
  }
#endif
}

void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int OC) {
  PhaseScope phase_scope(Phase::activation, 0, 12.0 * N * OC);
  // pre, out are (N, OC); bias is (OC).
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    float* p = pre + static_cast<size_t>(r) * OC;
    float* o = out + static_cast<size_t>(r) * OC;
#if defined(__AVX512F__)
    int c = 0;
    for (; c + 16 <= OC; c += 16) {
      const __m512 v = _mm512_add_ps(_mm512_loadu_ps(p + c), _mm512_loadu_ps(bias + c));
      _mm512_storeu_ps(p + c, v);
      _mm512_storeu_ps(o + c, gelu16(v));
    }
    if (const __mmask16 m = tail_mask(OC - c)) {
      const __m512 v =
          _mm512_add_ps(_mm512_maskz_loadu_ps(m, p + c), _mm512_maskz_loadu_ps(m, bias + c));
      _mm512_mask_storeu_ps(p + c, m, v);
      _mm512_mask_storeu_ps(o + c, m, gelu16(v));
    }
#else
#pragma omp simd
    for (int c = 0; c < OC; c++) {
      float v = p[c] + bias[c];
      p[c] = v;
      o[c] = gelu_one(v);
    }
#endif
  }
}

void bias_gelu_forward_bf16(bf16* out, float* pre, const float* bias, int N, int OC) {
  PhaseScope phase_scope(Phase::activation, 0, 10.0 * N * OC);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < N; r++) {
    float* p = pre + static_cast<size_t>(r) * OC;
    bf16* o = out + static_cast<size_t>(r) * OC;
#if defined(__AVX512F__)
    // pre += bias as the row is read; a second pass (rare) reads the sums back.
    auto first = [&](int c, __mmask16 m) {
      const __m512 v =
          _mm512_add_ps(_mm512_maskz_loadu_ps(m, p + c), _mm512_maskz_loadu_ps(m, bias + c));
      _mm512_mask_storeu_ps(p + c, m, v);
      return gelu16(v);
    };
    auto again = [&](int c, __mmask16 m) { return gelu16(_mm512_maskz_loadu_ps(m, p + c)); };
    store_row_bf16(o, OC, first, again);
#else
    for (int c = 0; c < OC; c++) {
      float v = p[c] + bias[c];
      p[c] = v;
      o[c] = float_to_bf16(gelu_one(v));
    }
#endif
  }
}

void gelu_backward_bf16(bf16* dinp, const float* inp, const float* dout, size_t n) {
  PhaseScope phase_scope(Phase::activation, 0, 10.0 * double(n));
  // Blocks of a multiple of 16 values, so only the last one has a tail (as the forward).
  constexpr long long kBlock = 4096;
  const long long count = static_cast<long long>(n), blocks = (count + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (long long b = 0; b < blocks; b++) {
    const long long i = b * kBlock;
    gelu_backward_bf16_row(dinp + i, inp + i, dout + i, int(std::min(kBlock, count - i)));
  }
}

void gelu_forward_bf16(bf16* out, const float* pre, size_t n) {
  PhaseScope phase_scope(Phase::activation, 0, 6.0 * double(n));
  // Blocks of a multiple of 16 values, so only the last one has a tail.
  constexpr long long kBlock = 4096;
  const long long count = static_cast<long long>(n), blocks = (count + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (long long b = 0; b < blocks; b++) {
    const long long i = b * kBlock;
    gelu_forward_bf16_row(out + i, pre + i, int(std::min(kBlock, count - i)));
  }
}

void gelu_forward_bf16_row(bf16* out, const float* pre, int n) {
#if defined(__AVX512F__)
  auto value = [&](int c, __mmask16 m) { return gelu16(_mm512_maskz_loadu_ps(m, pre + c)); };
  store_row_bf16(out, n, value, value);
#else
  for (int c = 0; c < n; c++) out[c] = float_to_bf16(gelu_one(pre[c]));
#endif
}

void gelu_backward_bf16_row(bf16* dinp, const float* pre, const float* dout, int n) {
#if defined(__AVX512F__)
  auto value = [&](int c, __mmask16 m) {
    return _mm512_mul_ps(gelu_grad16(_mm512_maskz_loadu_ps(m, pre + c)),
                         _mm512_maskz_loadu_ps(m, dout + c));
  };
  store_row_bf16(dinp, n, value, value);
#else
  for (int c = 0; c < n; c++) dinp[c] = float_to_bf16(gelu_grad(pre[c]) * dout[c]);
#endif
}

}  // namespace mt
