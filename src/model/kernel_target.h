// Whose kernels a dry run of the model counts (model/dry_model.h, train/memory_estimate.h).
//   this_host: what the trainer allocates on this machine: the attention core's saved form
//              as its CPU kernel for the shape keeps it (kernels/attention.h,
//              attention_saved_form), the kernels' workspaces and thread_local buffers as
//              this process's dispatch and OpenMP team size them. The trainer's own memory
//              check counts this, and it matches the memory records.
//   profile:   a local plan's CPU (plan/hardware_profile.h), which must not depend on the CPU
//              that runs the planner: the kernels the calibrated profile says its CPU ran
//              (ProfileKernels below), and where the profile does not say, a size that holds
//              on any CPU:
//                - the gpt2 block's attention core: the kernel the profile's CPU picks for
//                  the precision and head dim (kernels/attention.h attention_kernel_on over
//                  the profile's attention_kernels), with its saved form, backward scratch
//                  and per-thread buffers;
//                - the flash kernel (llama block; gpt2 under --cp or --dropout): its scratch
//                  in the fp32 tiles' layouts, the widest of the tables', for a team of the
//                  plan's --threads (not this process's OpenMP team);
//                - the bf16 linears' weight-gradient scratch: the most any CPU's bf16 GEMM
//                  path keeps (kernels/matmul_bf16.h, the primitive's transposed dout).
//              Everything else a dry run counts was already the same on every CPU (the
//              experts' kernels' scratch, grouped_gemm.h; the dense bf16 weights' packs,
//              dense_gemm_bf16.h).
//   gpu:       a GPU preset of the planner (plan/memory_model.h), which must not depend on the
//              CPU that runs the planner. The attention core is a fused kernel, as
//              FlashAttention's (Dao et al. 2022, 2023): its forward keeps the output and each
//              query row's log-sum-exp (the slot's lse, one fp32 per head and token, never a
//              (T, T) tensor), its backward the rows' D = rowsum(dO * O) (b, heads, T); its
//              tiles live in on-chip memory. No CPU kernel's scratch is counted: not the
//              attention kernels' (T, T) buffers or per-thread packs, not the linears' or the
//              experts' thread_local weight-gradient scratch. The engine's own buffers (slots,
//              residual stream, sequence-parallel gathers, recomputation scratch) stay.
// A dry run only: a trainer's chunks are built for this host.
#pragma once

#include <cstddef>

#include "kernels/attention.h"
#include "kernels/flash_attention.h"

namespace mt {

enum class KernelTarget { this_host, profile, gpu };

// What KernelTarget::profile counts of the profile's CPU (plan/hardware_profile.h).
struct ProfileKernels {
  AttentionIsa attention;  // the attention kernels it runs (attention_kernels)
  int threads = 1;         // each rank's OpenMP threads (--threads)
};

// The gpt2 block's attention kernel a dry run counts for this precision and (local) shape:
// this CPU's pick (attention_kernel) for this_host and gpu (whose block runs no CPU kernel),
// the profile's CPU's for profile.
AttentionKernel counted_attention_kernel(KernelTarget target, const ProfileKernels& profile,
                                         bool bf16, int C, int NH);
// The flash kernel's forward scratch and the flash core's backward scratch (model/flash_core.h)
// a dry run counts: this CPU's tiles and this process's team, or the profile's as above.
size_t counted_flash_forward_scratch_floats(KernelTarget target, const ProfileKernels& profile,
                                            const FlashAttention& a);
size_t counted_flash_core_backward_scratch_floats(KernelTarget target,
                                                  const ProfileKernels& profile,
                                                  const FlashAttention& a);

}  // namespace mt
