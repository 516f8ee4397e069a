// Vocabulary parallelism: the token table (tied with the LM head) split by rows over tp,
// and the cross-entropy computed from the vocabulary-sharded logits without ever
// assembling a full (N, V) row on any rank.
//
// The vocabulary is padded to Vp = ceil(V / t) * t so every rank holds Vp / t rows; rank r
// holds ids [r * Vp/t, (r+1) * Vp/t). Padding rows (ids >= V) are zero-initialised, get no
// gradient, are skipped by the parameter table's global view (never in a file), and their
// logit columns are excluded from the softmax: a zero row would otherwise add exp(0 - max)
// to the normaliser and change the loss (Megatron issue #1754).
//
// Cross-entropy over shards, per row n (x = this rank's logits, real columns only):
//   m   = max over ranks of max(x)                     all-reduce (max) of N floats
//   s   = sum over ranks of sum(exp(x - m))  \         one all-reduce (sum) of 2N floats
//   x_t = the target's logit, from its owner  /        (the others add 0)
//   loss = log(s) + m - x_t;  dlogits = dloss * (exp(x - m) / s - onehot(target))
//
// Header-only for the same reason as mappings.h.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

#include "comm/communicator.h"
#include "kernels/crossentropy.h"
#include "kernels/vec_math.h"
#include "parallel/tensor_parallel/mappings.h"

namespace mt::tp {

struct VocabShard {
  int start = 0;  // first id held
  int rows = 0;   // rows held (padded)
  int real = 0;   // of which real ids (< V): the rest is padding
};

inline int padded_vocab(int V, int t) {
  return (V + t - 1) / t * t;
}

inline VocabShard vocab_shard(int V, int t, int rank) {
  VocabShard s;
  s.rows = padded_vocab(V, t) / t;
  s.start = rank * s.rows;
  const int left = V - s.start;
  s.real = left <= 0 ? 0 : (left < s.rows ? left : s.rows);
  return s;
}

// losses (N) = cross-entropy of targets (N) given this rank's logits (N, shard.rows); with
// dloss != 0 the logits are overwritten with their gradient (padding columns 0).
// stats: scratch of 3N floats. With no tp group this is the one-worker kernel itself.
inline void vocab_parallel_crossentropy(float* losses, float* logits, const int* targets,
                                        float dloss, int N, const VocabShard& shard,
                                        Communicator* c, float* stats) {
  const int V = shard.rows, real = shard.real, start = shard.start;
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
  c->all_reduce(m, m, size_t(N), DType::f32, ReduceOp::max).wait();
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* x = logits + size_t(n) * V;
    const int t = targets[n] - start;
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
  c->all_reduce(s, s, 2 * size_t(N), DType::f32, ReduceOp::sum).wait();
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    losses[n] = std::log(s[n]) + m[n] - xt[n];
    if (dloss == 0.f) continue;
    float* x = logits + size_t(n) * V;
    const float scale = dloss / s[n];
#pragma omp simd
    for (int v = 0; v < real; ++v) x[v] *= scale;
    for (int v = real; v < V; ++v) x[v] = 0.f;
    const int t = targets[n] - start;
    if (t >= 0 && t < real) x[t] -= dloss;
  }
}

}  // namespace mt::tp
