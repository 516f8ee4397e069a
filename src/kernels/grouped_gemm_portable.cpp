// The grouped GEMMs in plain C++ (GroupedGemmPath::portable): the path of a CPU without the
// micro-kernels' instructions and without oneDNN's bf16 matmul, and a check on the others.
// Per group, B is copied once into a row-major fp32 (K, N) block, so that the inner loop
// runs along a row of B and a row of C, unit-stride, which the compiler vectorises for the
// build's target; each C element is summed in k order, as the micro-kernels do. bf16
// operands are widened exactly, so both precisions share one loop.
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/grouped_gemm_kernels.h"

namespace mt::grouped {

namespace {

float widen(float x) {
  return x;
}
float widen(bf16 x) {
  return bf16_to_float(x);
}

// dst (K, N) = B of o, row-major fp32.
template <typename T>
void copy_b(std::vector<float>& dst, const Operands<T>& o, int N) {
  dst.resize(size_t(o.K) * N);
  for (int k = 0; k < o.K; ++k)
    for (int n = 0; n < N; ++n)
      dst[size_t(k) * N + n] = widen(o.b_trans ? o.b[n * o.ldb + k] : o.b[k * o.ldb + n]);
}

template <typename T>
void run_group(const Operands<T>& o, int N, std::vector<float>& b) {
  copy_b(b, o, N);
  for (int i = 0; i < o.M; ++i) {
    float* c = o.c + i * o.ldc;
    if (!o.accumulate) std::fill(c, c + N, 0.0f);
    for (int k = 0; k < o.K; ++k) {
      const float a = widen(o.a_trans ? o.a[k * o.lda + i] : o.a[i * o.lda + k]);
      const float* bk = b.data() + size_t(k) * N;
      for (int n = 0; n < N; ++n) c[n] += a * bk[n];
    }
  }
}

template <typename T>
void run_groups(const Problem<T>& p) {
  const int N = p.N();
#pragma omp parallel for schedule(dynamic, 1) if (omp_get_max_threads() > 1 && p.groups > 1)
  for (int g = 0; g < p.groups; ++g) {
    if (p.offset[g] == p.offset[g + 1]) continue;  // no rows: no output, no gradient
    thread_local std::vector<float> b;
    run_group(operands(p, g), N, b);
  }
}

}  // namespace

void run_portable(const Problem<float>& p) {
  run_groups(p);
}

void run_portable(const Problem<bf16>& p) {
  run_groups(p);
}

}  // namespace mt::grouped
