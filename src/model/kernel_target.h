// Whose kernels a dry run of the model counts (model/dry_model.h, train/memory_estimate.h).
//   this_host: what the trainer allocates on this machine: the attention core's saved form as
//              its CPU kernel for the shape keeps it (kernels/attention.h,
//              attention_saved_form), the kernels' workspaces and thread_local buffers as
//              this process's dispatch and OpenMP team size them. Local plans and the
//              trainer's own memory check count this, and it matches the memory records.
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

namespace mt {

enum class KernelTarget { this_host, gpu };

}  // namespace mt
