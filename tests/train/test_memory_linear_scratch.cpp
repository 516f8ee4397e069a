// Memory the linears' weight gradients keep outside every arena, in a thread_local buffer on
// the rank's thread that only grows (stop 44 found neither counted): the fp32 transposed
// orientation's (C, OC) copy (kernels/matmul_weight_grad.h) and the bf16 primitive's
// transposed copy of dout (kernels/matmul_bf16.h). The estimate counts the largest layer's
// once per rank, whatever the team.
#include <gtest/gtest.h>

#include "kernels/matmul_bf16.h"
#include "kernels/matmul_weight_grad.h"
#include "model/dry_model.h"
#include "model/gpt.h"
#include "train/memory_estimate.h"

namespace mt {
namespace {

// One worker, 4 sequences of 64 tokens: 256 rows per linear; d 128, so fc is (512, 128).
TrainOptions run(Precision precision) {
  TrainOptions o;
  o.model.layers = 2, o.model.dim = 128, o.model.heads = 4, o.model.seq = 64;
  o.model.vocab = 256;
  o.optim.batch = 4;
  o.optim.precision = precision;
  return o;
}

int64_t chunk_linear_scratch(const TrainOptions& o) {
  DryModelShape shape;
  shape.max_b = o.optim.batch, shape.precision = o.optim.precision;
  const RankFootprint rank = DryModel(o.model, shape).rank(GPT::whole_model(o.model));
  return int64_t(rank.chunks.at(0).linear_scratch_bytes);
}

// fp32: fc (OC 4 C) takes the transposed orientation and keeps its (C, OC) fp32 copy; the
// head (256 outputs of 128: OC 2 C) and the others keep none. Counted once, not per thread.
TEST(MemoryLinearScratch, Fp32TransposedWeightGradientCopyIsCountedOncePerRank) {
  const TrainOptions o = run(Precision::fp32);
  const int64_t fc = 128 * 512 * int64_t(sizeof(float));
  EXPECT_EQ(int64_t(fp32_weight_grad_scratch_bytes(128, 512)), fc);
  EXPECT_EQ(fp32_weight_grad_scratch_bytes(128, 384), 0u);  // qkv: plain orientation
  EXPECT_EQ(chunk_linear_scratch(o), fc);
  const int64_t by_shape = estimate_rank_memory(o).workspace_bytes;
  {
    const ScopedFp32WeightGradPath plain(Fp32WeightGradPath::plain);
    EXPECT_EQ(chunk_linear_scratch(o), 0);
    EXPECT_EQ(by_shape - estimate_rank_memory(o).workspace_bytes, fc);
  }
  TrainOptions two = o;
  two.optim.threads = 2;
  TrainOptions one = o;
  one.optim.threads = 1;
  const ScopedFp32WeightGradPath plain(Fp32WeightGradPath::plain);
  const int64_t plain_growth =
      estimate_rank_memory(two).workspace_bytes - estimate_rank_memory(one).workspace_bytes;
  const ScopedFp32WeightGradPath transposed(Fp32WeightGradPath::by_shape);
  EXPECT_EQ(estimate_rank_memory(two).workspace_bytes - estimate_rank_memory(one).workspace_bytes,
            plain_growth);
}

// bf16: on the matmul primitive the layers with OC <= C (attn_proj, mlp_proj) copy dout
// (256 rows x 128) transposed; the other routines read it in place and keep nothing.
TEST(MemoryLinearScratch, Bf16PrimitiveTransposedDoutIsCounted) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const TrainOptions o = run(Precision::bf16);
  const int64_t dout_t = 256 * 128 * int64_t(sizeof(bf16));
  int64_t primitive = 0;
  {
    const ScopedBf16GemmPath path(Bf16GemmPath::primitive);
    EXPECT_EQ(int64_t(matmul_bf16_weight_grad_scratch_bytes(256, 128, 128)), dout_t);
    EXPECT_EQ(matmul_bf16_weight_grad_scratch_bytes(256, 128, 512), 0u);  // fc: OC > C
    EXPECT_EQ(chunk_linear_scratch(o), dout_t);
    primitive = estimate_rank_memory(o).workspace_bytes;
  }
  for (const Bf16GemmPath other : {Bf16GemmPath::jit_gemm, Bf16GemmPath::mixed}) {
    if (!matmul_bf16_path_available(other)) continue;
    const ScopedBf16GemmPath path(other);
    EXPECT_EQ(matmul_bf16_weight_grad_scratch_bytes(256, 128, 128), 0u);
    EXPECT_EQ(chunk_linear_scratch(o), 0);
    EXPECT_EQ(primitive - estimate_rank_memory(o).workspace_bytes, dout_t);
  }
}

}  // namespace
}  // namespace mt
