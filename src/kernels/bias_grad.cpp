#include "kernels/bias_grad.h"

#include <algorithm>
#include <cstddef>

#include "kernels/column_chunks.h"

namespace mt {

namespace {

inline float as_float(float v) {
  return v;
}
inline float as_float(bf16 v) {
  return bf16_to_float(v);
}

// Columns [o0, o1) of dout, at most kChunk of them, summed over all rows into dbias. The rows
// are read front to back (a stream the prefetcher follows, where a block of columns walked
// down the rows reads a strided few cache lines per row) four at a time, each column adding
// them left to right: acc + r0 + r1 + r2 + r3 is the order of four single-row passes.
constexpr int kChunk = 2048;  // 8 KB of sums: L1-resident beside the streamed rows

template <class T>
void chunk_sums(float* dbias, const T* dout, int N, int OC, int o0, int o1) {
  float acc[kChunk];
  const int w = o1 - o0;
  std::fill(acc, acc + w, 0.0f);
  const T* col = dout + o0;
  int n = 0;
  for (; n + 4 <= N; n += 4) {
    const T* r0 = col + size_t(n) * OC;
    const T *r1 = r0 + OC, *r2 = r1 + OC, *r3 = r2 + OC;
#pragma omp simd
    for (int o = 0; o < w; o++)
      acc[o] = acc[o] + as_float(r0[o]) + as_float(r1[o]) + as_float(r2[o]) + as_float(r3[o]);
  }
  for (; n < N; n++) {
    const T* r = col + size_t(n) * OC;
#pragma omp simd
    for (int o = 0; o < w; o++) acc[o] += as_float(r[o]);
  }
  for (int o = 0; o < w; o++) dbias[o0 + o] += acc[o];
}

template <class T>
void column_sums_add(float* dbias, const T* dout, int N, int OC) {
  for_each_column_chunk(OC, kChunk,
                        [&](int o0, int o1) { chunk_sums(dbias, dout, N, OC, o0, o1); });
}

}  // namespace

void bias_grad_add(float* dbias, const float* dout, int N, int OC) {
  column_sums_add(dbias, dout, N, OC);
}

void bias_grad_add(float* dbias, const bf16* dout, int N, int OC) {
  column_sums_add(dbias, dout, N, OC);
}

}  // namespace mt
