// A block's flash attention core (kernels/flash_attention.h) over the precision's ops
// (precision_ops.h), on one worker or across the context-parallel group
// (context_parallel_attention.h): the one path by which both blocks' attention reaches the
// ring. The llama block always runs it; the gpt2 block runs it under --cp > 1, where its
// (T, T) probabilities cannot exist (the keys live on other ranks).
//
//   forward   out = attention(a), kept as Ops::Act; lse (B, H, Tq) kept for the backward.
//             Under bf16 on one worker the kernel writes the bf16 output itself; across the
//             cp group the steps merge in fp32 (Ops::staged), then it is kept.
//   backward  D = rowsum(d_out * out) from the kept output (read as bf16 under bf16), then the
//   probabilities recomputed from the final lse; dqkv in the fused
//             [q | k | v] rows a points into (dk at a.k - a.q, dv at a.v - a.q, stride a.ldq),
//             overwritten, and kept as Ops::Act: written as bf16 by the kernel under bf16 on
//             one worker; in fp32 on one worker stored by the kernel as 0 + x (FlashGrads::
//             overwrite: the bits of a sum onto zeros, without the memset); across the cp
//             group summed in fp32 onto zeros (the ring's steps add up), then kept.
//   scratch   flash_core_backward_scratch_floats: the kernel's, then D.
#pragma once

#include <cstring>
#include <span>
#include <type_traits>

#include "kernels/bf16.h"
#include "kernels/flash_attention.h"
#include "model/context_parallel_attention.h"

namespace mt {

inline size_t flash_core_backward_scratch_floats(const FlashAttention& a) {
  return flash_attention_backward_scratch_floats(a) + size_t(a.B) * a.H * a.Tq;
}
// The same for a team of `workers` on any CPU (kernels/flash_attention.h; a local plan's
// count for its profile, model/kernel_target.h).
inline size_t flash_core_backward_scratch_floats(const FlashAttention& a, int workers) {
  return flash_attention_backward_scratch_floats(a, workers) + size_t(a.B) * a.H * a.Tq;
}

// cp null: one worker. scratch: the forward scratch of a.
template <class Ops>
void flash_core_forward(const Ops& ops, typename Ops::Act* out, float* lse, const FlashAttention& a,
                        ContextParallelAttention* cp, std::span<float> scratch) {
  const size_t cols = size_t(a.H) * a.hd;
  if constexpr (std::is_same_v<typename Ops::Act, bf16>)
    if (!cp) return flash_attention_forward(out, cols, lse, a, scratch);
  float* o = ops.staged(out);
  if (cp)
    cp->forward(o, cols, lse, a, scratch);
  else
    flash_attention_forward(o, cols, lse, a, false, scratch);
  ops.keep(out, o, size_t(a.B) * a.Tq * cols);
}

// d_qkv (B * Tq rows of a.ldq) = the core's input gradient from d_out (B * Tq, H hd).
template <class Ops>
void flash_core_backward(const Ops& ops, typename Ops::Act* d_qkv, const float* d_out,
                         const typename Ops::Act* out, const float* lse, const FlashAttention& a,
                         ContextParallelAttention* cp, float* scratch) {
  const size_t cols = size_t(a.H) * a.hd;
  const size_t flash = flash_attention_backward_scratch_floats(a);
  float* D = scratch + flash;
  flash_attention_backward_prep(D, out, cols, d_out, cols, a.B, a.Tq, a.H, a.hd);
  const std::span<float> kernel(scratch, flash);
  if constexpr (std::is_same_v<typename Ops::Act, bf16>)
    if (!cp) {
      const FlashGradsBf16 g{d_qkv, d_qkv + (a.k - a.q), d_qkv + (a.v - a.q), a.ldq, a.ldq, a.ldq};
      return flash_attention_backward(g, d_out, cols, lse, D, a, kernel);
    }
  const size_t nqkv = size_t(a.B) * a.Tq * a.ldq;
  float* dqkv = ops.staged(d_qkv);
  FlashGrads g{dqkv, dqkv + (a.k - a.q), dqkv + (a.v - a.q), a.ldq, a.ldq, a.ldq};
  if (cp) {
    std::memset(dqkv, 0, nqkv * sizeof(float));  // the ring's steps add up
    cp->backward(g, d_out, cols, lse, D, a, kernel);
  } else {
    g.overwrite = true;  // one call puts every row once: 0 + x, no memset first
    flash_attention_backward(g, d_out, cols, lse, D, a, kernel);
  }
  ops.keep(d_qkv, dqkv, nqkv);
}

}  // namespace mt
