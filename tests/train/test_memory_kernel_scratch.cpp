// Memory the experts' kernels keep outside every arena, in thread_local buffers that live as
// long as their thread (model/expert_mlp.h, kernel_scratch; kernels/grouped_gemm.h bounds
// them), and the bf16 experts' share of the chunk's fp32 stage: the estimate counts the
// first and reserves the second only where it is used (stop 39 found neither counted). The
// same for the bf16 attention core's per-thread buffers (stop 42) and the fp32 one's (stop 43).
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/attention.h"
#include "kernels/attention_amx.h"
#include "kernels/grouped_gemm.h"
#include "model/dry_model.h"
#include "model/gpt.h"
#include "train/memory_estimate.h"

namespace mt {
namespace {

// One worker, 8 sequences of 32 tokens in one microbatch: N = 256 token rows per MoE layer.
TrainOptions moe_run(Arch arch, Precision precision) {
  TrainOptions o;
  o.model.arch = arch;
  o.model.layers = 2, o.model.dim = 64, o.model.heads = 4, o.model.seq = 32;
  o.model.vocab = 256;
  o.model.experts = 4, o.model.topk = 2;
  o.optim.batch = 8;
  o.optim.precision = precision;
  return o;
}

// The fused SwiGLU backward keeps a 32 x Fe fp32 block of d_act per OpenMP thread, on
// every CPU as far as the estimate goes (the packs are counted so too): each thread more
// adds exactly one block.
TEST(MemoryKernelScratch, FusedSwigluBackwardBlockIsCountedPerThread) {
  TrainOptions o = moe_run(Arch::llama, Precision::bf16);
  o.model.expert_ffn_dim = 96;
  o.optim.threads = 1;
  const int64_t one = estimate_rank_memory(o).workspace_bytes;
  o.optim.threads = 3;
  const int64_t three = estimate_rank_memory(o).workspace_bytes;
  EXPECT_EQ(three - one, 2 * 32 * 96 * int64_t(sizeof(float)));
  EXPECT_EQ(grouped_bf16_swiglu_scratch_bytes(96), size_t(32 * 96 * sizeof(float)));
}

// The bytes gpt2's attention core keeps per thread in moe_run's shape (T 32, C 64, 4 heads).
int64_t gpt_attention_per_thread(Precision precision) {
  return int64_t(attention_thread_scratch_bytes_of(precision == Precision::bf16, 32, 64, 4));
}

// Without SwiGLU experts, or in fp32, no thread keeps an experts' block (gpt2's bf16
// attention core keeps its own buffers per thread).
TEST(MemoryKernelScratch, NoPerThreadBlockWithoutBf16SwigluExperts) {
  for (const auto& [arch, precision] :
       {std::pair{Arch::gpt2, Precision::bf16}, std::pair{Arch::llama, Precision::fp32}}) {
    TrainOptions o = moe_run(arch, precision);
    o.optim.threads = 1;
    const int64_t one = estimate_rank_memory(o).workspace_bytes;
    o.optim.threads = 2;
    const int64_t attention = arch == Arch::gpt2 ? gpt_attention_per_thread(precision) : 0;
    EXPECT_EQ(estimate_rank_memory(o).workspace_bytes, one + attention) << arch_name(arch);
  }
}

// One worker, 4 sequences of 128 tokens, 2 heads of 32: the attention cores' shape below.
TrainOptions attention_run(Precision precision) {
  TrainOptions o;
  o.model.layers = 2, o.model.dim = 64, o.model.heads = 2, o.model.seq = 128;  // hd 32
  o.model.vocab = 256;
  o.optim.batch = 4;
  o.optim.precision = precision;
  return o;
}

// The estimate's workspace grows by exactly `per_thread` for each thread more.
void expect_counted_once_per_thread(TrainOptions o, int64_t per_thread) {
  o.optim.threads = 1;
  const int64_t one = estimate_rank_memory(o).workspace_bytes;
  o.optim.threads = 3;
  EXPECT_EQ(estimate_rank_memory(o).workspace_bytes - one, 2 * per_thread);
}

// The dry model's chunk keeps `per_thread` bytes of thread scratch.
void expect_chunk_thread_scratch(const TrainOptions& o, int64_t per_thread) {
  DryModelShape shape;
  shape.max_b = o.optim.batch, shape.precision = o.optim.precision;
  const RankFootprint rank = DryModel(o.model, shape).rank(GPT::whole_model(o.model));
  EXPECT_EQ(int64_t(rank.chunks.at(0).thread_scratch_bytes), per_thread);
}

// The bf16 attention core (AVX512-BF16 register tiles) keeps dP / dS and its packed operands
// per thread, not in the (B, NH, T, T) backward scratch: the estimate counts them once per
// thread, and the chunk reserves no scratch the kernel does not read.
TEST(MemoryKernelScratch, Bf16AttentionBuffersAreCountedPerThreadAndNoUnusedScratch) {
  const TrainOptions o = attention_run(Precision::bf16);
  if (attention_kernel(true, 64, 2) != AttentionKernel::bf16_avx512)
    GTEST_SKIP() << "the bf16 attention core is not the AVX512-BF16 one here";
  const int64_t per_thread = int64_t(attention_thread_scratch_bytes_of(true, 128, 64, 2));
  // Its (T, T) dP / dS alone is 64 KiB at T 128.
  EXPECT_GE(per_thread, 128 * 128 * int64_t(sizeof(float)));
  expect_counted_once_per_thread(o, per_thread);
  EXPECT_EQ(attention_backward_scratch_floats(4, 128, 64, 2, true), 0u);
  expect_chunk_thread_scratch(o, per_thread);
}

// The fp32 attention core (AVX-512 register tiles) keeps its (T, T) dP / dS per thread too
// (stop 43), and since stop 44 a (T, T) buffer for the scores and P it recomputes from the
// row statistics: counted once per thread, and no (B, NH, T, T) scratch reserved for it. The
// sgemm path (other head dims) still takes the caller's scratch.
TEST(MemoryKernelScratch, Fp32AttentionGradientIsCountedPerThreadAndNoUnusedScratch) {
  const TrainOptions o = attention_run(Precision::fp32);
  if (attention_kernel(false, 64, 2) != AttentionKernel::fp32_avx512)
    GTEST_SKIP() << "the fp32 attention core is not the AVX-512 one here";
  const int64_t per_thread = int64_t(attention_thread_scratch_bytes_of(false, 128, 64, 2));
  EXPECT_EQ(per_thread, 2 * 128 * 128 * int64_t(sizeof(float)));
  expect_counted_once_per_thread(o, per_thread);
  EXPECT_EQ(attention_backward_scratch_floats(4, 128, 64, 2, false), 0u);
  // hd 24 is no register-tile head dim: the sgemm path, with its (B, NH, T, T) scratch.
  EXPECT_EQ(attention_backward_scratch_floats(4, 128, 48, 2, false), size_t(4) * 2 * 128 * 128);
  EXPECT_EQ(attention_thread_scratch_bytes_of(false, 128, 48, 2), 0u);
  expect_chunk_thread_scratch(o, per_thread);
}

// The AMX tile kernel's per-thread buffers (packed operands, the (Tp / 2, Tp) pairs of dS and
// P, a block's stage) are counted too (stop 43): their size is arithmetic on any CPU; where the
// kernel runs, the estimate adds them once per thread.
TEST(MemoryKernelScratch, AmxAttentionBuffersAreCountedPerThread) {
  // T 128, hd 32: the two pair buffers alone are 2 x 64 x 128 x 4 bytes.
  EXPECT_GE(attention_amx_scratch_bytes(128, 32), size_t(2 * 64 * 128 * 4));
  EXPECT_GT(attention_amx_scratch_bytes(128, 64), attention_amx_scratch_bytes(128, 32));
  EXPECT_EQ(attention_amx_scratch_bytes(128, 16), 0u);  // no AMX kernel at hd 16
  if (attention_kernel(true, 64, 2) != AttentionKernel::bf16_amx_tiles)
    GTEST_SKIP() << "the bf16 attention core is not the AMX tiles here";
  EXPECT_EQ(attention_thread_scratch_bytes_of(true, 128, 64, 2),
            attention_amx_scratch_bytes(128, 32));
  expect_counted_once_per_thread(attention_run(Precision::bf16),
                                 int64_t(attention_amx_scratch_bytes(128, 32)));
}

// --moe-overlap-parts > 1: the weight gradients gather the parts' rows of a run of experts
// into one block on the rank's thread; at worst every row, R = N x min(k, experts) = 512,
// of the larger Linear's dout + inp (gpt2: C + H = 64 + 256 elements). One part: none.
TEST(MemoryKernelScratch, WeightGradientGatherIsCountedWithSeveralParts) {
  for (const Precision precision : {Precision::fp32, Precision::bf16}) {
    const int64_t element = precision == Precision::bf16 ? 2 : 4;
    const int64_t gather = 512 * (64 + 256) * element;
    for (const int parts : {1, 2}) {
      TrainOptions o = moe_run(Arch::gpt2, precision);
      DryModelShape shape;
      shape.max_b = o.optim.batch, shape.precision = precision, shape.moe_overlap_parts = parts;
      DryModel model(o.model, shape);
      const RankFootprint rank = model.rank(GPT::whole_model(o.model));
      ASSERT_EQ(rank.chunks.size(), 1u);
      EXPECT_EQ(int64_t(rank.chunks[0].rank_scratch_bytes), parts > 1 ? gather : 0)
          << precision_name(precision) << " parts " << parts;
      EXPECT_EQ(int64_t(rank.chunks[0].thread_scratch_bytes), gpt_attention_per_thread(precision))
          << precision_name(precision);
      // The estimate's workspace: the chunk's arenas, the data loader's batch, the linears'
      // weight-gradient scratch (test_memory_linear_scratch.cpp) and the gather.
      o.parallel.moe_overlap_parts = parts;
      const int64_t batch = 2 * int64_t(o.optim.batch) * o.model.seq * int64_t(sizeof(int));
      const int64_t arenas = int64_t(rank.chunks[0].workspace_floats * sizeof(float));
      const int64_t linears = int64_t(rank.chunks[0].linear_scratch_bytes);
      EXPECT_EQ(estimate_rank_memory(o).workspace_bytes - arenas - batch - linears -
                    gpt_attention_per_thread(precision),
                parts > 1 ? gather : 0)
          << precision_name(precision) << " parts " << parts;
    }
    // The estimate adds it once whatever the thread count: the rank's own thread gathers (the
    // second thread adds only the attention core's per-thread buffers).
    TrainOptions o = moe_run(Arch::gpt2, precision);
    o.parallel.moe_overlap_parts = 2;
    const int64_t two_parts = estimate_rank_memory(o).workspace_bytes;
    o.optim.threads = 2;
    EXPECT_EQ(estimate_rank_memory(o).workspace_bytes,
              two_parts + gpt_attention_per_thread(precision))
        << precision_name(precision);
  }
}

// The bf16 experts' stage takes d_act only from wide experts (H > C) that do not fuse
// SwiGLU; elsewhere dx's rows hold it (or the tiles never store it) and it is not reserved.
TEST(MemoryKernelScratch, Bf16ExpertsReserveTheStageOnlyWhereTheyUseIt) {
  const auto expert_stage = [](Arch arch, int expert_ffn) {
    TrainOptions o = moe_run(arch, Precision::bf16);
    o.model.expert_ffn_dim = expert_ffn;
    GPT model(o.model, GPT::whole_model(o.model), TensorParallelShard{}, o.optim.batch, {},
              Recompute::none, Precision::bf16);
    return model.chunk(0).moe_layers().at(0)->bf16_stage_floats();
  };
  // llama, Fe 48 <= C 64: fine-grained, d_act in dx's rows.
  EXPECT_EQ(expert_stage(Arch::llama, 48), 0u);
  // gpt2's GELU experts are 4C wide: d_act goes through the stage in row pieces.
  EXPECT_GT(expert_stage(Arch::gpt2, 0), 0u);
  // llama, Fe 96 > C: the stage only where SwiGLU is not fused into the GEMMs' stores.
  EXPECT_EQ(expert_stage(Arch::llama, 96) == 0, grouped_bf16_fuses_swiglu(96));
}

}  // namespace
}  // namespace mt
