#include <cmath>
#include <cstddef>

#include "kernels/reference/reference.h"

namespace mt::ref {

namespace {
// log-sum-exp of row[0..V) in double.
double logsumexp(const float* row, int V) {
  double m = row[0];
  for (int v = 1; v < V; v++) m = std::max(m, static_cast<double>(row[v]));
  double sum = 0.0;
  for (int v = 0; v < V; v++) sum += std::exp(row[v] - m);
  return m + std::log(sum);
}
}  // namespace

void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V,
                          int ldv) {
  for (int n = 0; n < N; n++) {
    const float* row = logits + static_cast<size_t>(n) * ldv;
    losses[n] = static_cast<float>(logsumexp(row, V) - row[targets[n]]);
  }
}

void crossentropy_forward_backward(float* losses, float* logits, const int* targets, float dloss,
                                   int N, int V, int ldv) {
  for (int n = 0; n < N; n++) {
    float* row = logits + static_cast<size_t>(n) * ldv;
    double lse = logsumexp(row, V);
    losses[n] = static_cast<float>(lse - row[targets[n]]);
    for (int v = 0; v < ldv; v++) {
      double g = v < V ? std::exp(row[v] - lse) - (v == targets[n] ? 1.0 : 0.0) : 0.0;
      row[v] = static_cast<float>(dloss * g);
    }
  }
}

}  // namespace mt::ref
