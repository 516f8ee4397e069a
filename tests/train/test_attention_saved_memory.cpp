// What the gpt2 block keeps for its attention backward (kernels/attention.h, AttentionSaved):
// where the kernel recomputes P (the register-tile kernels, fp32 and AVX512-BF16), each row's
// maximum and 1 / sum, (b, NH, T, 2) floats a block, not the (b, NH, T, T) probabilities. The
// engine's memory estimate (what the planner asks) counts the slot as the block reserves it.
// --recompute selective moves the probabilities out of the slot (and reruns the core); since
// stop 47 it keeps the statistics (nothing is rerun) and drops only the AVX512-BF16 tiles'
// packed q and k, so it saves those bytes per block and no more.
#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "model/precision.h"
#include "train/memory_estimate.h"

namespace mt {
namespace {

// The step breakdown's shape: 4 layers, d 256, 8 heads of 32, T 128, 8 sequences.
TrainOptions breakdown_run(Precision precision) {
  TrainOptions o;
  o.model.layers = 4, o.model.dim = 256, o.model.heads = 8, o.model.seq = 128;
  o.model.vocab = 256;
  o.optim.batch = 8;
  o.optim.precision = precision;
  return o;
}

TEST(AttentionSavedMemory, SlotKeepsRowStatisticsWhereTheKernelRecomputes) {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    const bool bf16 = precision == Precision::bf16;
    TrainOptions o = breakdown_run(precision);
    const int64_t none = estimate_rank_memory(o).activations_bytes;
    o.optim.recompute = Recompute::selective;
    const int64_t selective = estimate_rank_memory(o).activations_bytes;
    // Stated from the kernel, not from attention_saved_form, so a block that kept the
    // probabilities after all (or a form chosen wrongly) shows.
    const AttentionKernel k = attention_kernel(bf16, 256, 8);
    const bool tiles = k == AttentionKernel::fp32_avx512 || k == AttentionKernel::bf16_avx512;
    // 32 KiB a block instead of 4 MiB; the AVX512-BF16 tiles also keep the forward's packed
    // q and k, (128 + 128) x 16 words a head (1 MiB a block), so the backward does not pack
    // them again.
    const int64_t packed = k == AttentionKernel::bf16_avx512 ? (128 + 128) * 32 / 2 : 0;
    const int64_t per_block =
        int64_t(8) * 8 * (128 * (tiles ? 2 : 128) + packed) * int64_t(sizeof(float));
    // Selective drops the probabilities (16 MiB for the four layers) or the packed q and k.
    const int64_t dropped = tiles ? int64_t(8) * 8 * packed * int64_t(sizeof(float)) : per_block;
    EXPECT_EQ(none - selective, 4 * dropped) << precision_name(precision);
    EXPECT_EQ(attention_saved_floats(attention_saved_form(bf16, 256, 8), 8, 128, 256, 8) * 4,
              size_t(per_block))
        << precision_name(precision);
  }
}

}  // namespace
}  // namespace mt
