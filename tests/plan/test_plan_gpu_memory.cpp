// GPU software's memory (plan/gpu_memory.h) against the paper it follows: Korthikanti et
// al. 2022 ("Reducing Activation Recomputation in Large Transformer Models"), Table 2's
// per-layer activations for every recomputation and sequence-parallel setting, the first
// stage's in-flight microbatches under 1F1B and interleaving (Section 4.3), the paper's 5x
// reduction, and its runs (and Narayanan et al. 2021's), which ran on 80 GB A100s, fitting.
#include <gtest/gtest.h>

#include "plan/gpu_memory.h"
#include "plan/search.h"
#include "plan/software_profiles.h"
#include "schedule/schedule.h"

namespace mt::plan {
namespace {

struct PaperModel {
  const char* name;
  int layers, hidden, heads, pp, gpus;
};
// Korthikanti et al. 2022, Table 3 (tp 8, s 2048, V 51200).
constexpr PaperModel kModels[] = {{"22B", 48, 6144, 64, 1, 8},
                                  {"175B", 96, 12288, 96, 8, 64},
                                  {"530B", 105, 20480, 128, 35, 280},
                                  {"1T", 128, 25600, 160, 64, 512}};

PlanRequest paper_request(const PaperModel& pm, const std::string& software) {
  PlanRequest r;
  r.model.layers = pm.layers;
  r.model.dim = pm.hidden;
  r.model.heads = pm.heads;
  r.model.seq = 2048;
  r.model.vocab = 51200;
  r.batch = pm.gpus;
  r.hardware = preset_profile("a100-80gb");
  apply_software(r.hardware, software);
  r.devices = pm.gpus;
  return r;
}

Layout paper_layout(int tp, bool sp, const std::string& recompute) {
  Layout l;
  l.tp = tp, l.sequence_parallel = sp, l.recompute = recompute_of(recompute),
  l.precision = Precision::bf16;
  return l;
}

// Table 2, in bytes per layer (s b h times the bracket), b = 1.
TEST(PlanGpuMemory, LayerActivationsAreKorthikantisTable2) {
  for (const PaperModel& pm : kModels) {
    const PlanRequest r = paper_request(pm, "megatron-lm-2022");
    const double s = 2048, h = pm.hidden, a = pm.heads, t = 8, sbh = s * h;
    const double core = 5 * a * s / h;
    auto bytes = [&](int tp, bool sp, const char* rc) {
      return layer_activation_bytes(r, paper_layout(tp, sp, rc));
    };
    EXPECT_DOUBLE_EQ(bytes(1, false, "none"), sbh * (34 + core)) << pm.name;
    EXPECT_DOUBLE_EQ(bytes(8, false, "none"), sbh * (10 + 24 / t + core / t)) << pm.name;
    EXPECT_DOUBLE_EQ(bytes(8, true, "none"), sbh * (34 / t + core / t)) << pm.name;
    EXPECT_DOUBLE_EQ(bytes(8, false, "selective"), sbh * (10 + 24 / t)) << pm.name;
    EXPECT_DOUBLE_EQ(bytes(8, true, "selective"), sbh * (34 / t)) << pm.name;
    EXPECT_DOUBLE_EQ(bytes(8, false, "full"), sbh * 2) << pm.name;
    EXPECT_DOUBLE_EQ(bytes(8, true, "full"), sbh * 2 / t) << pm.name;
    // "reduces activation memory by 5x" (abstract; Figure 7: tp + sp + selective against
    // the tp baseline): 4.9x for 530B and 1T, 5.4x for 175B, 6.2x for 22B.
    const double reduction = bytes(8, false, "none") / bytes(8, true, "selective");
    EXPECT_GT(reduction, 4.9) << pm.name;
    EXPECT_LT(reduction, 6.2) << pm.name;
  }
}

// Section 4.3: under 1F1B the first stage holds p microbatches of its L/p layers, L layers'
// worth; under the interleaved schedule L (1 + (p - 1) / (p v)) (Megatron-LM's
// theoretical_memory_usage.py: the same factor); with fewer microbatches than stages, m.
TEST(PlanGpuMemory, FirstStageHoldsTheSchedulesMicrobatchesInFlight) {
  const int p = 8, L = 96;
  const Schedule f = make_schedule("1f1b", p, 32, 1);
  EXPECT_DOUBLE_EQ(stage_peak(f, 0, {double(L) / p}), L);
  EXPECT_DOUBLE_EQ(stage_peak(f, p - 1, {double(L) / p}), double(L) / p);
  for (int v : {2, 3, 4, 6}) {
    const Schedule s = make_schedule("interleaved", p, 32, v);
    const std::vector<double> chunks(size_t(v), double(L) / (p * v));
    EXPECT_DOUBLE_EQ(stage_peak(s, 0, chunks), L * (1 + double(p - 1) / (p * v))) << v;
  }
  const Schedule few = make_schedule("1f1b", p, 3, 1);
  EXPECT_DOUBLE_EQ(stage_peak(few, 0, {double(L) / p}), 3.0 * L / p);
  EXPECT_DOUBLE_EQ(stage_peak(Schedule{}, 0, {double(L)}), L);
}

// The whole first stage: L layers' worth plus the token ids and the embedding's dropout
// mask per microbatch in flight; model state 2 + 4 + 12 bytes per parameter (bf16 with
// fp32 gradients, Megatron-LM's 18 without the distributed optimizer).
TEST(PlanGpuMemory, StageMemoryIsItsLayersEdgesAndModelState) {
  const PaperModel pm = kModels[1];  // 175B, pp 8
  PlanRequest r = paper_request(pm, "megatron-lm-2022");
  Layout l = paper_layout(8, true, "selective");
  l.pp = 8, l.dp = 1;
  const int m = microbatches(r, l);
  const Schedule s = make_schedule("1f1b", l.pp, m, 1);
  const PlannedMemory mem = software_memory(r, l, s);
  const double sb = 2048, h = pm.hidden;
  const double edges = 8 * (8 * sb + sb * h / 8);  // 8 in flight at the first stage
  EXPECT_EQ(mem.pp_stage, 0);
  EXPECT_NEAR(double(mem.activations), pm.layers * layer_activation_bytes(r, l) + edges, 1);
  EXPECT_EQ(mem.optimizer, mem.params * 6);  // 12 bytes against 2
  EXPECT_EQ(mem.grads, mem.params * 2);      // fp32 gradients
  // ZeRO 1 (the distributed optimizer) shards the 12 bytes over dp.
  Layout z = l;
  z.dp = 2, z.zero = 1;
  r.devices = 128, r.hardware.max_zero = 3;
  const PlannedMemory zm = software_memory(r, z, make_schedule("1f1b", 8, m / 2, 1));
  EXPECT_NEAR(double(zm.optimizer), double(mem.optimizer) / 2, 16);
}

// A run that ran is never refused: Korthikanti's four (selective + SP, tp 8, micro-batch 1)
// and Narayanan et al. 2021's trillion-parameter run (full recomputation, no SP, tp 8 pp 64,
// fp16) fit in an 80 GB A100 less its reserve. This engine's own footprint refused two of
// them (84.5 and 82.2 GiB).
TEST(PlanGpuMemory, PublishedRunsThatRanFit) {
  for (const PaperModel& pm : kModels) {
    const PlanRequest r = paper_request(pm, "megatron-lm-2022");
    Layout l = paper_layout(8, true, "selective");
    l.pp = pm.pp, l.dp = pm.gpus / (8 * pm.pp);
    const Schedule s = l.pp > 1 ? make_schedule("1f1b", l.pp, microbatches(r, l), 1) : Schedule{};
    const PlannedMemory mem = software_memory(r, l, s);
    EXPECT_LT(mem.total(), usable_bytes_per_rank(r)) << pm.name;
    // And the search plans it (it refused 530B and 1T as not fitting).
    PlanRequest fixed = r;
    fixed.tp = 8, fixed.pp = pm.pp, fixed.dp = l.dp, fixed.zero = 0, fixed.micro_batch = 1;
    fixed.sequence_parallel = true, fixed.recompute = Recompute::selective,
    fixed.precision = Precision::bf16;
    fixed.schedule = "1f1b";
    const SearchResult found = search_layouts(fixed, 1);
    ASSERT_EQ(found.candidates.size(), 1u) << pm.name;
    EXPECT_TRUE(found.candidates[0].fits) << pm.name;
  }
  PlanRequest r = paper_request({"1008B", 128, 25600, 160, 64, 3072}, "megatron-lm-2021");
  r.batch = 3072;
  Layout l = paper_layout(8, false, "full");
  l.pp = 64, l.dp = 6;
  const PlannedMemory mem = software_memory(r, l, make_schedule("1f1b", 64, microbatches(r, l), 1));
  EXPECT_LT(mem.total(), usable_bytes_per_rank(r));
  // fp16 gradients in 2021: 2 + 2 + 12 bytes per parameter.
  EXPECT_EQ(mem.grads, mem.params);
}

// The Llama block by the same items: Q 2sbq, K and V 2sbkv each (grouped-query attention),
// the projection's input 2sbq, SwiGLU's gate|up and product 6sbF, split over tp; the two
// norms' inputs and the qkv and MLP inputs outside the tp region; no dropout; FlashAttention
// keeps 4 bytes per head and token instead of the s x s probabilities.
TEST(PlanGpuMemory, LlamaLayerFollowsTheSameItems) {
  PlanRequest r = paper_request(kModels[0], "llama3-2024");
  r.model.arch = Arch::llama;
  r.model.dim = 16384, r.model.heads = 128, r.model.kv_heads = 8, r.model.ffn_dim = 53248;
  r.model.seq = 8192;
  for (bool sp : {false, true}) {
    const Layout l = paper_layout(8, sp, "none");
    const double sb = 8192, h = 16384, q = 16384, kv = 1024, F = 53248, t = 8;
    const double split = sb * 2 * (q + kv + kv + q + 3 * F) / t;
    const double outside = sb * 2 * 4 * h / (sp ? t : 1);
    const double lse = 4 * 128 / t * sb;
    EXPECT_DOUBLE_EQ(layer_activation_bytes(r, l), split + outside + lse) << sp;
  }
  // Context parallelism keeps 1/cp of the tokens.
  Layout l = paper_layout(8, true, "none");
  const double whole = layer_activation_bytes(r, l);
  l.cp = 16;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(r, l), whole / 16);
}

}  // namespace
}  // namespace mt::plan
