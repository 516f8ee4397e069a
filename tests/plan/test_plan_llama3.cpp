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
  Layout l;
  l.tp = 8, l.pp = 16, l.dp = 64, l.zero = 2, l.sequence_parallel = true, l.micro_batch = 1;
  l.schedule = "interleaved", l.virtual_stages = 6;
  l.precision = Precision::bf16;
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
