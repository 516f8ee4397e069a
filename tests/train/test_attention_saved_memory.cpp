// What the gpt2 block keeps for its attention backward (kernels/attention.h, AttentionSaved):
// where the kernel recomputes P (the register-tile kernels, fp32 and AVX512-BF16), each row's
// maximum and 1 / sum, (b, NH, T, 2) floats a block, not the (b, NH, T, T) probabilities. The
// engine's memory estimate (what the planner asks) counts the slot as the block reserves it,
// so --recompute selective, which moves exactly that buffer out of the slot, now saves the
// statistics' bytes per block and no more.
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
    // 32 KiB a block instead of 4 MiB: 16 MiB less for the four layers.
    const int64_t per_block = int64_t(8) * 8 * 128 * (tiles ? 2 : 128) * int64_t(sizeof(float));
    EXPECT_EQ(none - selective, 4 * per_block) << precision_name(precision);
    EXPECT_EQ(attention_saved_floats(attention_saved_form(bf16, 256, 8), 8, 128, 8) * 4,
              size_t(per_block))
        << precision_name(precision);
  }
}

}  // namespace
}  // namespace mt
