#include "tensor_parallel/vocab_parallel_cross_entropy.h"

#include <cmath>
#include <cstddef>

#include "kernels/crossentropy.h"
#include "kernels/vec_math.h"
#include "tensor_parallel/mappings.h"

namespace mt::tp {

void vocab_parallel_crossentropy(float* losses, float* logits, const int* targets, float dloss,
                                 int N, const VocabShard& shard, Communicator* c, float* stats) {
  const int V = shard.rows, real = shard.real;
  const int64_t start = shard.start;
  if (!active(c)) {
    if (dloss != 0.f)
      crossentropy_forward_backward(losses, logits, targets, dloss, N, real, V);
    else
      crossentropy_forward(losses, logits, targets, N, real, V);
    return;
  }
  float* m = stats;           // (N) row max
  float* s = stats + N;       // (N) sum of exp, then
  float* xt = stats + 2 * N;  // (N) target logit (contiguous with s: one all-reduce)
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + size_t(n) * V;
    float mx = -INFINITY;
    for (int v = 0; v < real; ++v) mx = x[v] > mx ? x[v] : mx;
    m[n] = mx;
  }
  {
    WaitedAtOnce at_once;
    c->all_reduce(m, m, size_t(N), DType::f32, ReduceOp::max).wait();
  }
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* x = logits + size_t(n) * V;
    const int64_t t = targets[n] - start;
    xt[n] = t >= 0 && t < real ? x[t] : 0.f;
    const float mx = m[n];
    float sum = 0.f;
    if (dloss != 0.f) {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < real; ++v) {
        const float e = exp_vec(x[v] - mx);
        x[v] = e;
        sum += e;
      }
    } else {
#pragma omp simd reduction(+ : sum)
      for (int v = 0; v < real; ++v) sum += exp_vec(x[v] - mx);
    }
    s[n] = sum;
  }
  {
    WaitedAtOnce at_once;
    c->all_reduce(s, s, 2 * size_t(N), DType::f32, ReduceOp::sum).wait();
  }
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    losses[n] = std::log(s[n]) + m[n] - xt[n];
    if (dloss == 0.f) continue;
    float* x = logits + size_t(n) * V;
    const float scale = dloss / s[n];
#pragma omp simd
    for (int v = 0; v < real; ++v) x[v] *= scale;
    for (int v = real; v < V; ++v) x[v] = 0.f;
    const int64_t t = targets[n] - start;
    if (t >= 0 && t < real) x[t] -= dloss;
  }
}

}  // namespace mt::tp
