#include "kernels/crossentropy.h"
#include "kernels/phase_profile.h"

#include <cmath>
#include <cstddef>

#include "core/error.h"
#include "kernels/vec_math.h"

namespace mt {

namespace {

float row_max(const float* x, int V) {
  float m = x[0];
#pragma omp simd reduction(max : m)
  for (int v = 1; v < V; v++) m = x[v] > m ? x[v] : m;
  return m;
}

}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V,
                          int ldv) {
  PhaseScope phase_scope(Phase::embedding, 0, 4.0 * N * V);
  // logits is (N, ldv), losses and targets are (N).
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float* x = logits + static_cast<size_t>(n) * ldv;
    float m = row_max(x, V);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) sum += exp_vec(x[v] - m);
    losses[n] = std::log(sum) + m - x[targets[n]];
  }
}

void crossentropy_forward_backward(float* losses, float* logits, const int* targets, float dloss,
                                   int N, int V, int ldv) {
  PhaseScope phase_scope(Phase::embedding, 0, 12.0 * N * V);
  // One sweep writes exp(x - max) over the logits, a second scales them to probabilities and
  // subtracts the one-hot target: the row stays in L1 between the two.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float* x = logits + static_cast<size_t>(n) * ldv;
    int t = targets[n];
    float m = row_max(x, V);
    float xt = x[t];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) {
      float e = exp_vec(x[v] - m);
      x[v] = e;
      sum += e;
    }
    losses[n] = std::log(sum) + m - xt;
    float scale = dloss / sum;
#pragma omp simd
    for (int v = 0; v < V; v++) x[v] *= scale;
    x[t] -= dloss;
    for (int v = V; v < ldv; v++) x[v] = 0.0f;
  }
}

}  // namespace mt
