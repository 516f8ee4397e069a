// Causal multi-head self-attention core (after the QKV projection, before c_proj).
// qkv rows are [q | k | v], each C wide; head h uses columns h*hd .. (h+1)*hd-1 of each
// (hd = C / NH). Under tensor parallelism C and NH are the rank's local share.
#pragma once

#include <cstddef>

#include "kernels/bf16.h"

namespace mt {

// What the forward keeps in `att` for the backward (docs/contracts.md, the attention core):
//  - probabilities: the softmax probabilities (B, NH, T, T), upper triangle 0;
//  - row_stats: each row's maximum score and 1 / sum (B, NH, T, 2), from which the backward
//    recomputes the scores with the forward's own products and P with its own exp and
//    scale arithmetic: bit for bit the P the forward used, so the gradients are those of the
//    probabilities form, without the (B, NH, T, T) store and reload. Only the register-tile
//    kernels (fp32_avx512, bf16_avx512) do this: attention_saved_form.
//  - row_stats_packed: per (batch, head), its row statistics (T, 2) followed by the
//    forward's bf16 packing of q (as rows of pairs) and of k (as key blocks), which the
//    backward's recomputation of the scores reads instead of packing q and k again: the same
//    bits (one packer wrote them), attention_bf16_avx512_packed_words(T, hd) 32-bit words a
//    head. The AVX512-BF16 register tiles (bf16_avx512) only.
enum class AttentionSaved { probabilities, row_stats, row_stats_packed };
// The form the engine keeps for this precision and shape on this CPU: row_stats_packed where
// attention_kernel picks the AVX512-BF16 tiles, row_stats where it picks the fp32 tiles,
// else probabilities.
AttentionSaved attention_saved_form(bool bf16, int C, int NH);
// Floats of `att` for that form.
size_t attention_saved_floats(AttentionSaved saved, int B, int T, int C, int NH);

// out (B, T, C) = concat_h softmax_causal(q_h k_h^T / sqrt(hd)) v_h
// att keeps what the backward needs (AttentionSaved; by default the probabilities).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       AttentionSaved saved = AttentionSaved::probabilities);

// dqkv (B, T, 3C) += gradient from dout (B, T, C). scratch holds
// attention_backward_scratch_floats(B, T, C, NH) floats owned by the caller (no allocation
// inside the step loop). saved: as the forward that wrote att. accumulate false: dqkv =
// the gradient (overwritten), bitwise a memset of dqkv followed by the accumulating call,
// without the memset's write pass (the fp32 block's use).
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH,
                        AttentionSaved saved = AttentionSaved::probabilities,
                        bool accumulate = true);
// bf16 true: what the engine's bf16 backward (AmxTiles::allow) needs. None where the kernel
// keeps dP / dS per thread instead (the fp32 AVX-512, the AVX512-BF16 and the AMX register
// tiles): only the sgemm path and oneDNN's batched AMX matmuls take it.
size_t attention_backward_scratch_floats(int B, int T, int C, int NH, bool bf16 = false);
// Bytes of the buffers the attention core keeps per thread (thread_local, grown to the
// largest head seen, never freed): the AVX512-BF16 and the AMX tile kernels' packed operands
// and dP / dS, the fp32 AVX-512 kernel's (T, T) dP / dS; for the two register-tile kernels
// also the (T, T) scores and P of the row_stats form (AttentionSaved above). 0 for the kernels that
// keep none (the sgemm path) or whose buffers are not counted yet (oneDNN's batched AMX matmuls).
size_t attention_thread_scratch_bytes_of(bool bf16, int T, int C, int NH);

// --precision bf16 (docs/precision.md): the same contract, with the products QK^T, P V and
// their backward products taking bf16 operands and accumulating in fp32 (AMX tiles or
// AVX512-BF16 dot products: attention_kernel below), as PyTorch's CPU autocast runs bmm;
// scores, softmax and its backward stay fp32. Where the CPU has neither or the head dim is
// not 16, 32, 64 or 128 these are the fp32 kernels above (attention_bf16_supported says
// which).
//
// AmxTiles::forbid takes the kernel the CPU would run without the hand-written AMX one (the
// fallback, for tests and comparisons); allow is what the engine always passes.
enum class AmxTiles { allow, forbid };
void attention_forward_bf16(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                            AmxTiles amx = AmxTiles::allow,
                            AttentionSaved saved = AttentionSaved::probabilities);
// accumulate false: dqkv = the gradient (overwritten; the block's fp32 stage needs no memset
// before it).
void attention_backward_bf16(float* dqkv, float* scratch, const float* dout, const float* qkv,
                             const float* att, int B, int T, int C, int NH, bool accumulate = true,
                             AmxTiles amx = AmxTiles::allow,
                             AttentionSaved saved = AttentionSaved::probabilities);
bool attention_bf16_supported(int C, int NH);

// The kernel the attention core runs for this precision and shape on this CPU, picked at
// run time: under bf16 the hand-written AMX tile kernel (attention_amx.h) where the CPU has
// AMX, Linux grants the tile state and the head dim is 32, 64 or 128; else oneDNN's AMX
// matmuls batched over the heads (attention_bf16_batched.h) at head dims 64/128 where the bf16
// GEMMs run on AMX; else AVX512-BF16 register tiles (attention_bf16_avx512.h); else the fp32
// kernels. In fp32 the AVX-512 register tiles (attention_avx512.h) for head dims
// 16/32/64/128, else sgemm.
enum class AttentionKernel { bf16_amx_tiles, bf16_amx, bf16_avx512, fp32_avx512, fp32_sgemm };
AttentionKernel attention_kernel(bool bf16, int C, int NH, AmxTiles amx = AmxTiles::allow);
const char* attention_kernel_name(AttentionKernel k);  // for the step breakdown

// What attention_kernel's pick depends on besides the precision and the shape: which kernels
// this CPU (and build) runs, each at the head dims it takes (the *_head_dim rules below).
// A calibrated profile records its CPU's (plan/hardware_profile.h, attention_kernels), so
// that a local plan counts that CPU's kernels wherever the planner runs
// (model/kernel_target.h).
struct AttentionIsa {
  bool fp32_tiles = false;   // attention_avx512: an AVX-512 build
  bool bf16_tiles = false;   // attention_bf16_avx512: and AVX512-BF16
  bool amx_batched = false;  // attention_bf16_batched: the bf16 GEMMs run on AMX
  bool amx_tiles = false;    // attention_amx: AMX, the tile state granted
  int bits() const;          // 1, 2, 4, 8 in this order (the profile's field)
  static AttentionIsa from_bits(int bits);
};
AttentionIsa attention_isa();  // this CPU's, or a ScopedAttentionIsa's
// attention_kernel's rule on the given kernels (attention_kernel is this on attention_isa()).
AttentionKernel attention_kernel_on(const AttentionIsa& isa, bool bf16, int C, int NH,
                                    AmxTiles amx = AmxTiles::allow);
// The head dims each kernel takes (attention_avx512_tiles.h KernelHeadDims, attention_amx.cpp
// AmxHeadDims, attention_bf16_batched_supports; tests/kernels/test_attention_dispatch.cpp
// checks them against this CPU's predicates).
constexpr bool attention_tiles_head_dim(int hd) {
  return hd == 16 || hd == 32 || hd == 64 || hd == 128;
}
constexpr bool attention_amx_head_dim(int hd) {
  return hd == 32 || hd == 64 || hd == 128;
}
constexpr bool attention_batched_head_dim(int hd) {
  return hd == 64 || hd == 128;
}
// Tests only: attention_isa() returns `isa` while this lives (process-wide), standing in for
// another CPU in a dry run's count (model/kernel_target.h). Nothing may run the kernels
// meanwhile: they would take a kernel this CPU may not have.
class ScopedAttentionIsa {
 public:
  explicit ScopedAttentionIsa(const AttentionIsa& isa);
  ~ScopedAttentionIsa();
  ScopedAttentionIsa(const ScopedAttentionIsa&) = delete;
  ScopedAttentionIsa& operator=(const ScopedAttentionIsa&) = delete;

 private:
  int saved_;
};

// What kernel k holds for a shape, whichever CPU runs this process: attention_saved_form,
// attention_backward_scratch_floats and attention_thread_scratch_bytes_of are these for
// attention_kernel's pick.
AttentionSaved attention_saved_form_of(AttentionKernel k);
size_t attention_backward_scratch_floats_of(AttentionKernel k, int B, int T, int NH);
size_t attention_thread_scratch_bytes_for(AttentionKernel k, int T, int C, int NH);

// The bf16 block's forms: the result rounded to bf16 as it is stored (bitwise to_bf16 of the
// fp32-output forms above), out16 (B, T, C) and dqkv16 (B, T, 3C) overwritten. Where the bf16
// kernels cannot write it directly (no AVX512-BF16, another head dim, or, for the backward,
// T > 128) the fp32 result goes through stage (as many floats as the output) first.
void attention_forward_bf16_out16(bf16* out16, float* stage, float* att, const float* qkv, int B,
                                  int T, int C, int NH, AmxTiles amx = AmxTiles::allow,
                                  AttentionSaved saved = AttentionSaved::probabilities);
void attention_backward_bf16_out16(bf16* dqkv16, float* stage, float* scratch, const float* dout,
                                   const float* qkv, const float* att, int B, int T, int C, int NH,
                                   AmxTiles amx = AmxTiles::allow,
                                   AttentionSaved saved = AttentionSaved::probabilities);

}  // namespace mt
