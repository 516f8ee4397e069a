// Llama 3 405B on 16,384 H100s under the llama3-2024 software (Meta, "The Llama 3 Herd of
// Models", 2024, section 3.3.2): context parallelism pays at 128K context and not at 8K, as
// the paper's own layouts (TP8 CP1 PP16 at 8K, TP8 CP16 PP16 at 128K) chose. TP is fixed to
// one server's 8 NVLink-connected GPUs as the paper places it; with tp open at 8K the model
// prefers tp 4 x cp 2 (under 5% faster: half of tp 8's activation collectives for a cheap
// GQA K/V all-gather; NVIDIA's NeMo 405B recipe runs cp 2 at 8K too).
#include <gtest/gtest.h>

#include "core/error.h"
#include "plan/search.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"

namespace mt::plan {
namespace {

PlanRequest llama3_405b(int seq, int batch) {
  PlanRequest r;
  r.model.arch = Arch::llama;
  r.model.layers = 126, r.model.dim = 16384, r.model.heads = 128, r.model.kv_heads = 8;
  r.model.ffn_dim = 53248, r.model.vocab = 128256, r.model.tie_embeddings = false;
  r.model.seq = seq;
  r.batch = batch;  // 16M tokens per step (Llama 3, 3.4.1)
  r.hardware = preset_profile("h100-80gb");
  apply_software(r.hardware, "llama3-2024");
  r.devices = 16384;
  r.tp = 8;
  r.precision = Precision::bf16;
  return r;
}

// The stated 8K layout on 8,192 GPUs (Llama 3, Table 4) with the planner's choice of the
// rest (docs/planner.md, modern runs): tp 8, pp 16 interleaved v6, dp 64, ZeRO 2, SP, mb 1.
Layout llama3_8k_layout() {
  Layout l;
  l.tp = 8, l.pp = 16, l.dp = 64, l.zero = 2, l.sequence_parallel = true, l.micro_batch = 1;
  l.schedule = "interleaved", l.virtual_stages = 6;
  l.precision = Precision::bf16;
  return l;
}

TEST(PlanLlama3, ContextParallelPaysAt128kNotAt8k) {
  const Candidate at8k = search_layouts(llama3_405b(8192, 2048), 1).candidates.at(0);
  EXPECT_EQ(at8k.layout.cp, 1) << "dp" << at8k.layout.dp << " pp" << at8k.layout.pp;
  const Candidate at128k = search_layouts(llama3_405b(131072, 128), 1).candidates.at(0);
  EXPECT_GT(at128k.layout.cp, 1);
  // Without cp nothing at 128K beats it: the choice is not a tie.
  PlanRequest no_cp = llama3_405b(131072, 128);
  no_cp.cp = 1;
  EXPECT_LT(at128k.time.step_s, 0.95 * search_layouts(no_cp, 1).candidates.at(0).time.step_s);
}

// Issue #30 item 6: at 128K on 8 GPUs a Llama 3 8B does not fit without context
// parallelism; where activations dominate, the refusal names --cp under a GPU software that
// has it: Llama 3's, and this engine's own (the default), whose cp is searched within the
// work budget since issue #30's second stop (search.cpp, cp_micro_batches).
TEST(PlanLlama3, RefusalAt128kNamesCpWhereActivationsDominate) {
  for (const char* software : {"llama3-2024", "meshtrain"}) {
    PlanRequest r;
    r.model.arch = Arch::llama;
    r.model.layers = 32, r.model.dim = 4096, r.model.heads = 32, r.model.kv_heads = 8;
    r.model.ffn_dim = 14336, r.model.vocab = 128256, r.model.tie_embeddings = false;
    r.model.seq = 131072;
    r.batch = 8;
    r.hardware = preset_profile("h100-80gb");
    apply_software(r.hardware, software);
    r.devices = 8;
    r.tp = 1, r.pp = 1, r.cp = 1;
    r.precision = Precision::bf16;
    std::string msg;
    try {
      search_layouts(r);
    } catch (const UsageError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("activations dominate"), std::string::npos) << software << ": " << msg;
    EXPECT_NE(msg.find("try a larger --cp"), std::string::npos) << software << ": " << msg;
  }
}

}  // namespace
}  // namespace mt::plan

namespace mt::plan {
namespace {

// Llama 3 3.3.2: "FP32 gradient accumulation during backward computation over multiple
// micro-batches" of BF16 weight gradients is a pass per microbatch and parameter (PyTorch
// FSDP2 adds each bf16 .grad into an fp32 unsharded_accumulated_grad): read 2 bytes, read
// and write 4, in the weight pass of every block.
TEST(PlanLlama3, Fp32GradientAccumulationIsAPassPerMicrobatch) {
  PlanRequest r = llama3_405b(8192, 2048);
  r.devices = 8192;
  const Layout l = llama3_8k_layout();
  EXPECT_TRUE(r.hardware.grad_accum_pass);
  PlanRequest unfused = r;
  unfused.hardware.grad_accum_pass = false;
  const StageCosts with = stage_costs(r, l)[5], plain = stage_costs(unfused, l)[5];
  EXPECT_NEAR(with.weight - plain.weight, with.params * (2 + 2 * 4) / r.hardware.memory_bw,
              1e-9 * with.weight);
  EXPECT_DOUBLE_EQ(with.forward, plain.forward);
}

}  // namespace
}  // namespace mt::plan

namespace mt::plan {
namespace {

// Sequence parallelism keeps only a rank's sequence shard of a column-parallel linear's
// input (the Korthikanti items of the memory model count it so), so its weight gradient
// gathers the input again in backward (Korthikanti et al. 2022, 4.2.2). Llama 3 405B at 8K,
// tp 8 in one server: a block's tp regions (attention, MLP) each all-gather and
// reduce-scatter the (8192, 16384) bf16 activations in forward, all-gather (the row-parallel
// output gradient) and reduce-scatter (the column-parallel input gradient) in backward, and
// all-gather the column-parallel input again: 10 collectives of one size per block. By hand
// (NCCL's ring on 8 NVLink GPUs): 7 steps x 8 us + 268,435,456 B x 7/8 / 370 GB/s = 0.6908 ms.
TEST(PlanLlama3, SequenceParallelBackwardGathersTheColumnInputAgain) {
  PlanRequest r = llama3_405b(8192, 2048);
  r.devices = 8192;
  const Layout l = llama3_8k_layout();
  ASSERT_FALSE(r.hardware.tp_backward_overlap);
  ASSERT_DOUBLE_EQ(r.hardware.intra_busbw, 370e9);
  ASSERT_DOUBLE_EQ(r.hardware.intra_latency_s, 8e-6);
  const double all_gather = 7 * 8e-6 + 8192.0 * 16384 * 2 * 7 / 8 / 370e9;
  EXPECT_NEAR(all_gather, 0.6908e-3, 1e-7);
  const StageCosts middle = stage_costs(r, l)[5];  // no embedding, no head
  ASSERT_GT(middle.blocks, 0);
  EXPECT_NEAR(middle.tp_comm, middle.blocks * 10 * all_gather, 1e-9);
}

}  // namespace
}  // namespace mt::plan
