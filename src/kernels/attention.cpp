#include "kernels/attention.h"

#include <cmath>

#include "kernels/matmul.h"
#include "kernels/vec_math.h"

namespace mt {

// Every (batch, head) pair is independent: OpenMP splits the pairs and each pair runs its
// small GEMMs single-threaded (oneDNN does not nest inside a parallel region).
//
// Causal skipping: the T query rows are cut into blocks of kRowBlock; block [i0, i1) only
// needs keys 0 .. i1-1, so with small blocks the GEMMs touch about half the (T, T) square.
// Measured at T = 128, hd = 64 (bench_kernels), dnnl_sgemm's per-call cost on such small
// GEMMs outweighs the saved FLOPs: 32-row blocks took 1.7x longer in the forward than one
// 128-row block, so the block is 128 and the skipping pays only for longer sequences.
// The probabilities above the diagonal are stored as exact zeros, which keeps the
// (B, NH, T, T) buffer valid for anyone reading it whole.
namespace {

constexpr int kRowBlock = 128;

struct HeadView {
  const float* q;  // (T, hd), row stride ld
  const float* k;
  const float* v;
  int ld;
};

HeadView head_view(const float* qkv, int b, int h, int T, int C, int hd) {
  const float* base = qkv + static_cast<size_t>(b) * T * 3 * C + static_cast<size_t>(h) * hd;
  return {base, base + C, base + 2 * C, 3 * C};
}

// Row i of a (T, T) block: causal softmax in place over columns 0..i, zeros after.
void softmax_causal_row(float* row, int i, int T) {
  float m = row[0];
  for (int j = 1; j <= i; j++) m = row[j] > m ? row[j] : m;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j <= i; j++) {
    float e = exp_vec(row[j] - m);
    row[j] = e;
    sum += e;
  }
  float inv = 1.0f / sum;
#pragma omp simd
  for (int j = 0; j <= i; j++) row[j] *= inv;
  for (int j = i + 1; j < T; j++) row[j] = 0.0f;
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  // qkv is (B, T, 3C), out is (B, T, C), att is (B, NH, T, T).
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      HeadView hv = head_view(qkv, b, h, T, C, hd);
      float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      float* o = out + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hd;
      for (int i0 = 0; i0 < T; i0 += kRowBlock) {
        int i1 = i0 + kRowBlock < T ? i0 + kRowBlock : T;
        float* ablk = a + static_cast<size_t>(i0) * T;
        // preatt[i0:i1, 0:i1] = scale * q[i0:i1] k[0:i1]^T
        sgemm(false, true, i1 - i0, i1, hd, scale, hv.q + static_cast<size_t>(i0) * hv.ld, hv.ld,
              hv.k, hv.ld, 0.0f, ablk, T);
        for (int i = i0; i < i1; i++) softmax_causal_row(a + static_cast<size_t>(i) * T, i, T);
        // out[i0:i1] = att[i0:i1, 0:i1] v[0:i1]
        sgemm(false, false, i1 - i0, hd, i1, 1.0f, ablk, T, hv.v, hv.ld, 0.0f,
              o + static_cast<size_t>(i0) * C, C);
      }
    }
  }
}

size_t attention_backward_scratch_floats(int B, int T, int /*C*/, int NH) {
  // One (T, T) gradient-of-probabilities block per (batch, head).
  return static_cast<size_t>(B) * NH * T * T;
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  // dqkv, qkv are (B, T, 3C); dout is (B, T, C); att, scratch are (B, NH, T, T).
  const int hd = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      HeadView hv = head_view(qkv, b, h, T, C, hd);
      float* dq = dqkv + static_cast<size_t>(b) * T * 3 * C + static_cast<size_t>(h) * hd;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const int ld = 3 * C;
      const float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      float* da = scratch + (static_cast<size_t>(b) * NH + h) * T * T;
      const float* dout_h = dout + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hd;

      for (int i0 = 0; i0 < T; i0 += kRowBlock) {
        int i1 = i0 + kRowBlock < T ? i0 + kRowBlock : T;
        // datt[i0:i1, 0:i1] = dout[i0:i1] v[0:i1]^T
        sgemm(false, true, i1 - i0, i1, hd, 1.0f, dout_h + static_cast<size_t>(i0) * C, C, hv.v, ld,
              0.0f, da + static_cast<size_t>(i0) * T, T);
        // Softmax backward, with the 1/sqrt(hd) of the forward folded in:
        // dpre = scale * att * (datt - sum_j att * datt).
        for (int i = i0; i < i1; i++) {
          const float* ar = a + static_cast<size_t>(i) * T;
          float* dr = da + static_cast<size_t>(i) * T;
          float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
          for (int j = 0; j <= i; j++) dot += ar[j] * dr[j];
#pragma omp simd
          for (int j = 0; j <= i; j++) dr[j] = scale * ar[j] * (dr[j] - dot);
          for (int j = i + 1; j < i1; j++) dr[j] = 0.0f;
        }
        // dq[i0:i1] += dpre[i0:i1, 0:i1] k[0:i1]
        sgemm(false, false, i1 - i0, hd, i1, 1.0f, da + static_cast<size_t>(i0) * T, T, hv.k, ld,
              1.0f, dq + static_cast<size_t>(i0) * ld, ld);
      }
      // Key/value rows j0..j1 receive from query rows i >= j0 only (the lower triangle).
      for (int j0 = 0; j0 < T; j0 += kRowBlock) {
        int j1 = j0 + kRowBlock < T ? j0 + kRowBlock : T;
        int rows = T - j0;
        // dv[j0:j1] += att[j0:T, j0:j1]^T dout[j0:T]
        sgemm(true, false, j1 - j0, hd, rows, 1.0f, a + static_cast<size_t>(j0) * T + j0, T,
              dout_h + static_cast<size_t>(j0) * C, C, 1.0f, dv + static_cast<size_t>(j0) * ld, ld);
        // dk[j0:j1] += dpre[j0:T, j0:j1]^T q[j0:T]
        sgemm(true, false, j1 - j0, hd, rows, 1.0f, da + static_cast<size_t>(j0) * T + j0, T,
              hv.q + static_cast<size_t>(j0) * ld, ld, 1.0f, dk + static_cast<size_t>(j0) * ld, ld);
      }
    }
  }
}

}  // namespace mt
