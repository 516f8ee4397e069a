// Issue #30: DeepSeek's multi-head latent attention (plan --attention mla) as the DeepSeek-V3
// report (2.1.1, 3.2.3) and its released config state it: parameters, FLOPs, the core's
// widths, the latents in memory, and where the planner refuses it. Every figure is derived
// by hand from the config (hidden 7168, 128 heads, q_lora_rank 1536, kv_lora_rank 512,
// qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128).
#include <gtest/gtest.h>

#include "core/error.h"
#include "deepseek_requests.h"
#include "plan/cost_model.h"
#include "plan/gpu_memory.h"
#include "plan/model_flops.h"
#include "plan/time_model.h"

namespace mt::plan {
namespace {

using testing::deepseek_v3_model;
using testing::deepseek_v3_run;
using testing::deepseek_v3_stated_layout;

AttentionShape mla() {
  AttentionShape a;
  a.family = AttentionFamily::mla;
  return a;
}

PlanRequest mla_run() {
  PlanRequest r = deepseek_v3_run(0);
  r.attention = mla();
  return r;
}

// W_qa 7168 x 1536, W_qb 1536 x 128*192, W_kva 7168 x (512 + 64), W_kvb 512 x 128*(128 + 128),
// W_o 128*128 x 7168, and the two latent RMSNorms (1536 + 512).
constexpr double kQa = 7168.0 * 1536, kQb = 1536.0 * 24576, kKva = 7168.0 * 576;
constexpr double kKvb = 512.0 * 32768, kO = 16384.0 * 7168, kLatentNorms = 2048;

TEST(PlanMla, ProjectionWeightsAreTheConfigsFive) {
  const BlockWidths w = block_widths(deepseek_v3_model(), mla());
  EXPECT_EQ(w.att.weights(1), kQa + kQb + kKva + kKvb + kO);
  EXPECT_EQ(w.att.weights(1), 187105280.0);
  EXPECT_EQ(w.att.latent_norms, kLatentNorms);
  // The core: 128 heads, scores 192 wide, values 128 wide.
  EXPECT_EQ(w.q, 128.0 * 192);
  EXPECT_EQ(w.kv, 128.0 * 192);
  EXPECT_EQ(w.v, 128.0 * 128);
  EXPECT_EQ(w.o, 128.0 * 128);
}

// The whole model: 671,026,404,352 parameters without the MTP module, the report's "671B
// total parameters" (embedding and untied head 2 x 129280 x 7168, 61 attentions and their
// two RMSNorms, 3 dense SwiGLUs of 18432, 58 MoE layers of 256 routed + 1 shared SwiGLU of
// 2048 and the 256 x 7168 router, the final norm).
TEST(PlanMla, DeepSeekV3HasItsPublished671BParameters) {
  const double attention = kQa + kQb + kKva + kKvb + kO + kLatentNorms + 2 * 7168;
  const double dense = 3 * 7168.0 * 18432, expert = 3 * 7168.0 * 2048;
  const double moe = 256 * expert + expert + 256 * 7168.0;
  const double expected = 61 * attention + 3 * dense + 58 * moe + 2 * 129280.0 * 7168 + 7168;
  EXPECT_EQ(expected, 671026404352.0);
  EXPECT_EQ(model_params(deepseek_v3_model(), mla()), expected);
}

// On a tp rank the down-projections and the latent norms stay whole, the up-projections and
// the output are split.
TEST(PlanMla, TensorParallelSplitsTheUpProjectionsNotTheDownProjections) {
  const ModelConfig m = deepseek_v3_model();
  double experts = 0;
  const double tp2 = rank_block_params(m, 0, 2, 1, &experts, mla());
  const double mlp = 3 * 7168.0 * 18432 / 2, norms = 2 * 7168.0;
  EXPECT_EQ(tp2, norms + kQa + kKva + (kQb + kKvb + kO) / 2 + kLatentNorms + mlp);
}

// Model FLOPs per token and layer, forward: 2 per projection weight, and over s keys the
// scores (2 s x 128 x 192) and the values (2 s x 128 x 128), full (not causally halved), as
// the planner counts MHA.
TEST(PlanMla, ForwardFlopsAreTheProjectionsAndA192By128Core) {
  const BlockWidths w = block_widths(deepseek_v3_model(), mla());
  const double s = 4096;
  EXPECT_EQ(w.att.forward_flops_per_token(s), 2 * 187105280.0 + 2 * s * 128 * (192 + 128));
  // The step: the difference from MHA of the same heads (56 wide) is the attention's alone.
  const ModelConfig m = deepseek_v3_model();
  const double mha = 2 * 7168.0 * (3 * 7168) + 2 * 7168.0 * 7168 + 4 * s * 7168;
  const double per_token = 61 * (w.att.forward_flops_per_token(s) - mha);
  EXPECT_NEAR(model_flops_per_step(m, 2, mla()) - model_flops_per_step(m, 2), 3 * 2 * s * per_token,
              1e-9 * model_flops_per_step(m, 2));
}

// The core (FlashAttention, causal half of the 4096 keys, 128 heads of one sequence): the
// scores over 192-wide heads, the values 128 wide; backward 2.5x.
TEST(PlanMla, TheCoreScoresOver192AndReadsValuesOf128) {
  const PlanRequest r = mla_run();
  const CostContext c = make_context(r, deepseek_v3_stated_layout());
  const Passes core = gemm_attention_core(c);
  const double scores = linear_gemm(c, c.rates, 4096, 2048, 192, 128);
  const double values = linear_gemm(c, c.rates, 4096, 128, 2048, 128);
  EXPECT_DOUBLE_EQ(core.forward, scores + values);
  EXPECT_DOUBLE_EQ(core.backward, 2.5 * (scores + values));
}

// Activations of a dense layer at the stated layout (tp 1, one 4096-token microbatch, bf16,
// FlashAttention, FP8-cached Linear inputs, norms and up-projections recomputed): the output
// projection's input (128 x 128 at 2 bytes), the SwiGLU's gate|up (2 bytes) and product (FP8),
// the down-projections' input (FP8), the two block norms' inputs (2 bytes), the latents the
// down-projections write (1536 + 512 + 64 at 2 bytes), the softmax statistics (4 bytes per
// head and query).
TEST(PlanMla, LayerActivationsKeepTheLatentsNotQkv) {
  const PlanRequest r = mla_run();
  const Layout l = deepseek_v3_stated_layout();
  const double s = 4096, h = 7168, F = 18432, fp8 = 1 + 4.0 / 128;
  const double per_token = 2 * 16384 + (2 * 2 * F + fp8 * F) + fp8 * h + 2 * 2 * h + 2 * 2112;
  EXPECT_NEAR(layer_activation_bytes(r, l), per_token * s + 4 * 128 * s, 1e-3);
  // Without the recomputation (3.2.3): Q and K (128 x 192 each), V (128 x 128), the latent
  // norms' outputs (the up-projections' FP8 inputs) and the second Linear input outside.
  PlanRequest kept = r;
  kept.hardware.norm_up_proj_recompute = false;
  const double more = 2 * (24576 + 24576 + 16384) + fp8 * 2048 + fp8 * h;
  EXPECT_NEAR(layer_activation_bytes(kept, l) - layer_activation_bytes(r, l), more * s, 1e-3);
}

// Context parallelism passes K (192-wide heads) and V (128-wide) of their own widths.
TEST(PlanMla, ContextParallelPassesKeysAndValuesOfTheirWidths) {
  PlanRequest r = deepseek_v3_run(0);
  r.attention = mla();
  apply_software(r.hardware, "megatron-bridge-2025");
  Layout l;
  l.dp = 1, l.cp = 2, l.tp = 1, l.pp = 1, l.ep = 1, l.precision = Precision::bf16;
  l.cp_comm = CpComm::allgather;
  const Schedule s = make_schedule(l.schedule, l.pp, 1, 1);
  r.batch = 1;
  const PlannedMemory m = software_memory(r, l, s);
  // Gathered K and V of the whole sequence, and their gradients: 2 x 4096 x (24576 + 16384) x 2.
  EXPECT_EQ(m.buffers, int64_t(2 * 4096.0 * (24576 + 16384) * 2));
}

TEST(PlanMla, RefusedWhereItCannotBePlanned) {
  PlanRequest r = mla_run();
  EXPECT_NO_THROW(validate_request(r));
  PlanRequest head_dim = r;
  head_dim.model.head_size = 56;
  EXPECT_THROW(validate_request(head_dim), UsageError);
  PlanRequest gqa = r;
  gqa.model.kv_heads = 8;
  EXPECT_THROW(validate_request(gqa), UsageError);
  PlanRequest local = r;
  local.hardware = preset_profile("h800-80gb");  // the meshtrain software: no paper memory
  EXPECT_THROW(validate_request(local), UsageError);
  PlanRequest narrow = r;
  narrow.attention.mla.kv_lora_rank = 0;
  EXPECT_THROW(validate_request(narrow), UsageError);
  PlanRequest gpt = r;
  gpt.model.arch = Arch::gpt2;
  EXPECT_THROW(validate_request(gpt), UsageError);
}

}  // namespace
}  // namespace mt::plan

namespace mt::plan {
namespace {

// Megatron-Bridge's DeepSeek-V3 recipe (recompute_modules ["mla_up_proj", "mlp"]) on the
// stated run's layout: the MLA up-projections' outputs Q, K, V (2 bytes x (24576 + 24576 +
// 16384) per token) are not kept, their inputs (the latent norms' outputs) are; the three
// dense layers' SwiGLU (gate|up and product, 2 bytes x 3 x 18432) is not kept, the MoE
// layers' is. Both are paid again in the backward.
PlanRequest bridge_recipe() {
  PlanRequest r = mla_run();
  apply_software(r.hardware, "megatron-bridge-2025");
  return r;
}

TEST(PlanMla, BridgeRecipeRecomputesTheUpProjectionsAndTheDenseMlp) {
  const PlanRequest r = bridge_recipe();
  const Layout l = deepseek_v3_stated_layout();
  PlanRequest kept = r;
  kept.hardware.up_proj_recompute = false;
  kept.hardware.dense_mlp_recompute = false;
  const double s = 4096, qkv = 2 * (24576.0 + 24576 + 16384), mlp = 2 * 3 * 18432.0;
  EXPECT_NEAR(layer_activation_bytes(kept, l) - layer_activation_bytes(r, l), (qkv + mlp) * s,
              1e-3);
  EXPECT_NEAR(
      layer_activation_bytes(kept, l, false, true) - layer_activation_bytes(r, l, false, true),
      qkv * s, 1e-3);
  const auto with = stage_costs(r, l), without = stage_costs(kept, l);
  // Stage 0 holds the dense layers (the up-projections and the MLP again), stage 3 MoE
  // layers only (the up-projections again).
  EXPECT_GT(with[0].recompute - without[0].recompute, with[3].recompute - without[3].recompute);
  EXPECT_GT(with[3].recompute, without[3].recompute);
  EXPECT_NEAR(with[3].backward - without[3].backward, with[3].recompute - without[3].recompute,
              1e-9 * with[3].backward);
}

}  // namespace
}  // namespace mt::plan
