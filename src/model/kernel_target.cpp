#include "model/kernel_target.h"

#include "model/flash_core.h"

namespace mt {

AttentionKernel counted_attention_kernel(KernelTarget target, const ProfileKernels& profile,
                                         bool bf16, int C, int NH) {
  if (target != KernelTarget::profile) return attention_kernel(bf16, C, NH);
  return attention_kernel_on(profile.attention, bf16, C, NH);
}

size_t counted_flash_forward_scratch_floats(KernelTarget target, const ProfileKernels& profile,
                                            const FlashAttention& a) {
  if (target != KernelTarget::profile) return flash_attention_forward_scratch_floats(a);
  return flash_attention_forward_scratch_floats(a, profile.threads);
}

size_t counted_flash_core_backward_scratch_floats(KernelTarget target,
                                                  const ProfileKernels& profile,
                                                  const FlashAttention& a) {
  if (target != KernelTarget::profile) return flash_core_backward_scratch_floats(a);
  return flash_core_backward_scratch_floats(a, profile.threads);
}

}  // namespace mt
