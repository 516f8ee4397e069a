// Which attention kernel runs (kernels/attention.h: attention_kernel over the CPU's kernels,
// AttentionIsa) and what each kernel holds for a shape: the form its forward keeps, the
// backward scratch it takes from the caller and its per-thread buffers. The _on / _of / _for
// functions take the CPU's kernels or the kernel as an argument, so that a count for another
// CPU (a local plan's profile, model/kernel_target.h) does not depend on the CPU running
// this process; the others are the same for this CPU.
#include "kernels/attention.h"

#include <atomic>

#include "kernels/attention_amx.h"
#include "kernels/attention_avx512.h"
#include "kernels/attention_bf16_avx512.h"
#include "kernels/attention_bf16_batched.h"

namespace mt {

namespace {

// ScopedAttentionIsa's kernels (bits as AttentionIsa::bits), or -1: this CPU's.
std::atomic<int> isa_override{-1};

}  // namespace

int AttentionIsa::bits() const {
  return int(fp32_tiles) | int(bf16_tiles) << 1 | int(amx_batched) << 2 | int(amx_tiles) << 3;
}

AttentionIsa AttentionIsa::from_bits(int b) {
  return {(b & 1) != 0, (b & 2) != 0, (b & 4) != 0, (b & 8) != 0};
}

AttentionIsa attention_isa() {
  // Each predicate at a head dim its kernel takes: what is left is the CPU's (and build's).
  static const AttentionIsa here{attention_avx512_supports(32), attention_bf16_avx512_supports(32),
                                 attention_bf16_batched_supports(64), attention_amx_supports(32)};
  const int over = isa_override.load(std::memory_order_relaxed);
  return over < 0 ? here : AttentionIsa::from_bits(over);
}

ScopedAttentionIsa::ScopedAttentionIsa(const AttentionIsa& isa) : saved_(isa_override.load()) {
  isa_override = isa.bits();
}

ScopedAttentionIsa::~ScopedAttentionIsa() {
  isa_override = saved_;
}

AttentionKernel attention_kernel_on(const AttentionIsa& isa, bool bf16, int C, int NH,
                                    AmxTiles amx) {
  const int hd = NH > 0 && C % NH == 0 ? C / NH : 0;
  if (bf16 && amx == AmxTiles::allow && isa.amx_tiles && attention_amx_head_dim(hd))
    return AttentionKernel::bf16_amx_tiles;
  if (bf16 && isa.amx_batched && attention_batched_head_dim(hd)) return AttentionKernel::bf16_amx;
  if (bf16 && isa.bf16_tiles && attention_tiles_head_dim(hd)) return AttentionKernel::bf16_avx512;
  return isa.fp32_tiles && attention_tiles_head_dim(hd) ? AttentionKernel::fp32_avx512
                                                        : AttentionKernel::fp32_sgemm;
}

AttentionKernel attention_kernel(bool bf16, int C, int NH, AmxTiles amx) {
  return attention_kernel_on(attention_isa(), bf16, C, NH, amx);
}

const char* attention_kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::bf16_amx_tiles:
      return "bf16 AMX tiles (TDPBF16PS, scores and softmax per 32 query rows, attention_amx)";
    case AttentionKernel::bf16_amx:
      return "bf16 AMX (oneDNN matmuls batched over the heads, attention_bf16_batched)";
    case AttentionKernel::bf16_avx512:
      return "bf16 AVX512-BF16 register tiles (attention_bf16_avx512)";
    case AttentionKernel::fp32_avx512:
      return "fp32 AVX-512 register tiles (attention_avx512)";
    case AttentionKernel::fp32_sgemm:
      return "fp32 oneDNN sgemm per head";
  }
  return "";
}

bool attention_bf16_supported(int C, int NH) {
  const AttentionKernel k = attention_kernel(true, C, NH);
  return k == AttentionKernel::bf16_amx_tiles || k == AttentionKernel::bf16_amx ||
         k == AttentionKernel::bf16_avx512;
}

AttentionSaved attention_saved_form_of(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::bf16_avx512:
      return AttentionSaved::row_stats_packed;
    case AttentionKernel::fp32_avx512:
      return AttentionSaved::row_stats;
    default:
      return AttentionSaved::probabilities;
  }
}

AttentionSaved attention_saved_form(bool bf16, int C, int NH) {
  return attention_saved_form_of(attention_kernel(bf16, C, NH));
}

size_t attention_backward_scratch_floats_of(AttentionKernel k, int B, int T, int NH) {
  if (k != AttentionKernel::bf16_amx && k != AttentionKernel::fp32_sgemm) return 0;
  // One (T, T) gradient-of-probabilities block per (batch, head).
  return static_cast<size_t>(B) * NH * T * T;
}

size_t attention_backward_scratch_floats(int B, int T, int C, int NH, bool bf16) {
  return attention_backward_scratch_floats_of(attention_kernel(bf16, C, NH), B, T, NH);
}

size_t attention_thread_scratch_bytes_for(AttentionKernel k, int T, int C, int NH) {
  switch (k) {
    case AttentionKernel::bf16_avx512:
      return attention_bf16_avx512_scratch_bytes(T, C / NH);
    case AttentionKernel::bf16_amx_tiles:
      return attention_amx_scratch_bytes(T, C / NH);
    case AttentionKernel::fp32_avx512:  // thread_head_gradient and thread_head_probs
      return 2 * sizeof(float) * size_t(T) * T;
    default:
      return 0;
  }
}

size_t attention_thread_scratch_bytes_of(bool bf16, int T, int C, int NH) {
  return attention_thread_scratch_bytes_for(attention_kernel(bf16, C, NH), T, C, NH);
}

}  // namespace mt
