// Software profiles on GPU hardware (--software): what the training software does is an
// explicit field, each one changes the prediction the way its source says, the search keeps
// to the software's schedules, and --explain / bad input say so.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "cli/run_binary.h"
#include "core/error.h"
#include "plan/hardware_costs.h"
#include "plan/profile_fields.h"
#include "plan/search.h"
#include "plan/software_profiles.h"
#include "plan/time_model.h"
#include "plan_test_util.h"
#include "schedule/schedule_simulator.h"

namespace mt::plan {
namespace {

// A 1.3B-class GPT on a100-80gb (large enough that the modelled costs are not overheads).
PlanRequest gpu_request(int devices, const std::string& software) {
  PlanRequest r;
  r.model.layers = 8;
  r.model.dim = 2048;
  r.model.heads = 16;
  r.model.seq = 2048;
  r.model.vocab = 51200;
  r.batch = 32;
  r.hardware = preset_profile("a100-80gb");
  apply_software(r.hardware, software);
  r.devices = devices;
  return r;
}

Layout layout(int dp, int tp, int pp, int micro_batch, const std::string& schedule = "1f1b",
              int v = 1) {
  Layout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.micro_batch = micro_batch;
  l.schedule = schedule, l.virtual_stages = v, l.precision = Precision::bf16;
  return l;
}

PredictedTime predict(const PlanRequest& r, const Layout& l) {
  validate_candidate(r, l);
  const Schedule s =
      make_schedule(l.schedule, l.pp, r.batch / (l.dp * l.micro_batch), l.virtual_stages);
  return predict_time(r, l, s);
}

TEST(PlanSoftware, ProfilesAreExplicitFields) {
  const HardwareProfile a = preset_profile("a100-80gb");
  EXPECT_EQ(a.software, "meshtrain");
  EXPECT_EQ(a.dp_overlap, 1);
  EXPECT_FALSE(a.dropout || a.fp32_cross_entropy || a.p2p_blocking || a.grad_accum_pass);
  EXPECT_TRUE(a.schedules.empty());
  HardwareProfile m = a;
  apply_software(m, "megatron-lm-2021");
  EXPECT_EQ(m.dp_overlap, 0);
  EXPECT_EQ(m.grad_reduce_bytes, 2);  // fp16 buffers (no --accumulate-allreduce-grads-in-fp32)
  EXPECT_TRUE(m.dropout && m.fp32_cross_entropy && m.p2p_blocking && m.p2p_scatter_gather);
  EXPECT_TRUE(m.grad_accum_pass && !m.tp_backward_overlap && m.even_chunks);
  EXPECT_EQ(m.schedules, (std::vector<std::string>{"1f1b", "interleaved"}));
  apply_software(m, "megatron-lm-2022");
  EXPECT_EQ(m.grad_reduce_bytes, 4);  // bf16 forces fp32 reduction
  EXPECT_TRUE(!m.grad_accum_pass && m.tp_backward_overlap);
  // Every field, the schedules, and whether DualPipe-V is offered.
  EXPECT_EQ(software_lines(m).size(), software_table("megatron-lm-2022").settings.size() + 2);
  // Megatron-Core r0.8.0 as the README's H100 table ran it: the distributed optimizer with
  // both dp overlaps, fp32 reduction, tp communication overlapped in forward and backward.
  apply_software(m, "megatron-core-2024");
  EXPECT_TRUE(m.dp_overlap == 1 && m.param_gather_overlap == 1 && m.max_zero == 1);
  EXPECT_EQ(m.grad_reduce_bytes, 4);
  EXPECT_TRUE(m.tp_backward_overlap && m.tp_comm_overlap && !m.fp8_gemms && m.flash_attention);
  apply_software(m, "meshtrain");
  EXPECT_EQ(m.dp_overlap, 1);
  EXPECT_FALSE(m.dropout || m.tp_comm_overlap);
  EXPECT_THROW(apply_software(m, "deepspeed"), UsageError);
}

// Every table sets every software field of the registry exactly once, within its range.
TEST(PlanSoftware, EveryTableSetsEverySoftwareFieldOnce) {
  for (const SoftwareTable& t : software_tables()) {
    for (const ProfileField& f : profile_fields()) {
      if (!f.software) continue;
      const auto n =
          std::count_if(t.settings.begin(), t.settings.end(),
                        [&](const SoftwareSetting& s) { return s.key == std::string(f.key); });
      EXPECT_EQ(n, 1) << t.name << " " << f.key;
    }
    HardwareProfile h = t.name == std::string(kLocalSoftware) ? testing::synthetic_local()
                                                              : preset_profile("a100-80gb");
    apply_software(h, t.name);
    EXPECT_EQ(profile_field_error(h), "") << t.name;
    for (const SoftwareSetting& s : t.settings)
      EXPECT_EQ(profile_field_value(h, s.key), s.value) << t.name << " " << s.key;
  }
  // The local engine's table is not a --software for GPU hardware, nor a GPU table local.
  HardwareProfile gpu = preset_profile("a100-80gb"), local = testing::synthetic_local();
  EXPECT_THROW(apply_software(gpu, kLocalSoftware), UsageError);
  EXPECT_THROW(apply_software(local, "megatron-lm-2022"), UsageError);
}

// --explain prints the constants the code computes with (it once said 32 bytes and two
// world all-reduces for local plans, whose step used 52 and three), and the step time
// follows the same fields.
TEST(PlanSoftware, ExplainNamesTheConstantsTheCodeUses) {
  PlanRequest local = testing::small_request(2);
  const auto has = [](const PlanRequest& r, const std::string& text) {
    for (const std::string& line : time_assumptions(r))
      if (line.find(text) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has(local, "optimizer: 52 bytes streamed per updated element in 4 passes"));
  EXPECT_TRUE(has(local, "plus 3 latency-bound all-reduces over the world"));
  EXPECT_TRUE(has(local, "software meshtrain-local: optimizer_bytes 52 -- "));
  PlanRequest gpu = gpu_request(8, "meshtrain");
  EXPECT_TRUE(has(gpu, "optimizer: 32 bytes streamed per updated element in 2 passes"));
  EXPECT_TRUE(has(gpu, "plus 2 latency-bound all-reduces over the world"));
  // Two more world all-reduces cost exactly two more 8-byte all-reduces over the world.
  Layout l;
  l.dp = 2;
  const PredictedTime before = predict_time(local, l, Schedule{});
  local.hardware.world_all_reduces += 2;
  const PredictedTime after = predict_time(local, l, Schedule{});
  const double one = collective_seconds(local.hardware, Collective::all_reduce, 8,
                                        group_span(local.hardware, 2, 1));
  EXPECT_GT(one, 0);
  EXPECT_NEAR(after.optimizer_s - before.optimizer_s, 2 * one, 1e-12);
  EXPECT_TRUE(has(local, "plus 5 latency-bound all-reduces over the world"));
  EXPECT_TRUE(has(local, "(set by the hardware file; meshtrain-local has 3)"));
}

TEST(PlanSoftware, DpReductionAfterThePipelineIsExposedInFull) {
  // dp 4, one microbatch per replica: meshtrain hides the reduction under the backward,
  // Megatron 2021 reduces the whole 16-bit buffer after it.
  const Layout l = layout(4, 1, 1, 8);
  const PredictedTime mesh = predict(gpu_request(4, "meshtrain"), l);
  EXPECT_EQ(mesh.dp_exposed_s, 0);
  PlanRequest r = gpu_request(4, "megatron-lm-2021");
  const PredictedTime meg = predict(r, l);
  const std::vector<StageCosts> sc = stage_costs(r, l);
  const double full = collective_seconds(r.hardware, Collective::all_reduce, sc[0].params * 2,
                                         group_span(r.hardware, 4, 1));
  EXPECT_DOUBLE_EQ(meg.dp_exposed_s, full);
  // Dropout, the fp32 loss and the gradient-accumulation pass make every pass slower.
  const std::vector<StageCosts> ms = stage_costs(gpu_request(4, "meshtrain"), l);
  EXPECT_GT(sc[0].forward, ms[0].forward);
  EXPECT_GT(sc[0].backward, ms[0].backward);
  EXPECT_GT(sc[0].weight, ms[0].weight);
  EXPECT_GT(meg.optimizer_s, mesh.optimizer_s);  // 54 vs 32 bytes per element
  EXPECT_GT(meg.step_s, mesh.step_s);
}

// --tp-comm-overlap (Transformer Engine's userbuffers): under SP each forward all-gather and
// reduce-scatter and the row-parallel backward's all-gather hide under the GEMM they feed or
// follow, exposing only what exceeds it; the weight-gradient pass is untouched, nothing
// changes without SP, and with nothing to hide under (GEMMs at an unbounded rate) the
// collectives are exposed in full, as without the overlap.
TEST(PlanSoftware, TpCommOverlapHidesTheForwardCollectivesUnderTheirGemms) {
  const auto stage = [](bool overlap, bool sp, double peak) {
    PlanRequest r = gpu_request(8, "megatron-core-2024");
    r.hardware.tp_comm_overlap = overlap;
    r.hardware.peak_bf16 = peak;
    Layout l = layout(1, 8, 1, 1);
    l.sequence_parallel = sp;
    return stage_costs(r, l)[0];
  };
  const double a100 = 312e12;
  const StageCosts on = stage(true, true, a100), off = stage(false, true, a100);
  EXPECT_GT(off.tp_comm, 0);
  EXPECT_LT(on.tp_comm, 0.5 * off.tp_comm);
  EXPECT_NEAR(off.forward - on.forward + off.backward - on.backward, off.tp_comm - on.tp_comm,
              1e-12);
  EXPECT_LT(on.backward, off.backward);
  EXPECT_DOUBLE_EQ(on.weight, off.weight);
  const StageCosts no_sp_on = stage(true, false, a100), no_sp_off = stage(false, false, a100);
  EXPECT_DOUBLE_EQ(no_sp_on.forward, no_sp_off.forward);
  EXPECT_DOUBLE_EQ(no_sp_on.tp_comm, no_sp_off.tp_comm);
  // GEMMs at 1e30 FLOP/s cost their launch overhead only: the collectives stay (less that).
  const StageCosts free_on = stage(true, true, 1e30), free_off = stage(false, true, 1e30);
  EXPECT_GT(free_on.tp_comm, 0.9 * free_off.tp_comm);
}

TEST(PlanSoftware, BlockingP2pIsPaidByEveryChunkAndTheTiedEmbeddingIsReduced) {
  PlanRequest r = gpu_request(16, "megatron-lm-2021");
  const Layout l = layout(2, 4, 2, 2, "interleaved", 2);
  const PredictedTime t = predict(r, l);
  // The simulator plays each chunk's F and B with the transfer added, no latency.
  const Schedule s = make_schedule("interleaved", 2, r.batch / (2 * 2), 2);
  std::vector<OpCosts> costs;
  for (const StageCosts& c : stage_costs(r, l))
    costs.push_back({c.forward / 2 + t.pp_p2p_s, c.backward / 2 + t.pp_p2p_s, c.weight / 2, 0});
  EXPECT_DOUBLE_EQ(t.pipeline_s, simulate_schedule(s, costs).makespan);
  // Scatter/gather: 1/tp of the boundary per link, then an all-gather over tp.
  const double boundary = 2.0 * 2048 * 2048 * 2;
  EXPECT_DOUBLE_EQ(t.pp_p2p_s, p2p_seconds(r.hardware, boundary / 4, true) +
                                   collective_seconds(r.hardware, Collective::all_gather, boundary,
                                                      group_span(r.hardware, 4, 1)));
  // The dp reduction (no overlap) plus the tied embedding's all-reduce over the two ends.
  const double vocab_slice = 51200.0 / 4 * 2048 * 2;
  EXPECT_GT(t.dp_exposed_s, collective_seconds(r.hardware, Collective::all_reduce, vocab_slice,
                                               group_span(r.hardware, 2, 4 * 2)));
}

TEST(PlanSoftware, SearchKeepsToTheSoftwaresSchedules) {
  PlanRequest r = gpu_request(8, "megatron-lm-2021");
  r.pp = 2;
  r.tp = 2;
  const std::vector<Layout> all = enumerate_layouts(r);
  ASSERT_FALSE(all.empty());
  bool interleaved = false;
  for (const Layout& l : all) {
    EXPECT_TRUE(l.schedule == "1f1b" || l.schedule == "interleaved") << l.schedule;
    EXPECT_EQ(l.zero, 0);
    if (l.schedule != "interleaved") continue;
    interleaved = true;
    EXPECT_EQ(r.model.layers % (l.pp * l.virtual_stages), 0) << l.virtual_stages;
    EXPECT_EQ((r.batch / (l.dp * l.micro_batch)) % l.pp, 0) << l.micro_batch;
  }
  EXPECT_TRUE(interleaved);
  r.hardware = preset_profile("a100-80gb");  // meshtrain: every schedule, uneven chunks too
  const std::vector<Layout> mesh = enumerate_layouts(r);
  EXPECT_TRUE(
      std::any_of(mesh.begin(), mesh.end(), [](const Layout& l) { return l.schedule == "zb-h1"; }));
  EXPECT_GT(mesh.size(), all.size());
}

TEST(PlanSoftware, CommandFileAndBadInput) {
  using mt::testing::run_meshtrain;
  const std::string model = "plan --layers 4 --dim 256 --heads 4 --seq 256 --vocab 1024 --batch 16";
  const auto e = run_meshtrain(model +
                               " --hardware a100-80gb --gpus 8 --software megatron-lm-2021 "
                               "--top 1 --explain");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("software megatron-lm-2021: dp_overlap 0"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("pipeline p2p: blocking"), std::string::npos) << e.out;
  for (const std::string args : {" --hardware a100-80gb --gpus 8 --software deepspeed",
                                 " --hardware local --ranks 2 --software megatron-lm-2021"}) {
    const auto r = run_meshtrain(model + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("meshtrain: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
  // A hardware file names a software profile and overrides one of its fields.
  mt::testing::TempDir dir;
  const std::string file = dir / "hw.toml";
  {
    std::ofstream f(file);
    f << "[hardware]\nname = \"a100-megatron\"\nmemory_bytes = 8e10\npeak_fp32 = 1.56e14\n"
         "peak_bf16 = 3.12e14\nmemory_bw = 1.7e12\nintra_busbw = 2.3e11\ninter_busbw = 2.3e10\n"
         "p2p_bw_intra = 2.4e11\nsoftware = \"megatron-lm-2022\"\ndp_overlap = 0.5\n";
  }
  const HardwareProfile h = load_profile(file);
  EXPECT_EQ(h.software, "megatron-lm-2022");
  EXPECT_EQ(h.dp_overlap, 0.5);
  EXPECT_TRUE(h.dropout);
  // ... and round-trips through the TOML writer.
  {
    std::ofstream f(file);
    f << profile_to_toml(h);
  }
  const HardwareProfile back = load_profile(file);
  EXPECT_EQ(back.software, "megatron-lm-2022");
  EXPECT_EQ(back.dp_overlap, 0.5);
  EXPECT_EQ(back.tp_backward_overlap, h.tp_backward_overlap);
}

// DualPipe-V per software, from its source: Megatron-LM (2021, 2022) and Llama 3 have none, so
// their searches never offer it and a fixed --schedule dualpipev is refused saying why;
// meshtrain's own software (GPU and local) has it. --explain says which, and why.
TEST(PlanSoftware, DualPipeVOnlyWhereTheSoftwareHasIt) {
  for (const char* software : {"megatron-lm-2021", "megatron-lm-2022", "llama3-2024"}) {
    PlanRequest r = gpu_request(8, software);
    r.pp = 2;
    for (const Layout& l : enumerate_layouts(r)) EXPECT_NE(l.schedule, "dualpipev") << software;
    r.schedule = "dualpipev";
    try {
      enumerate_layouts(r);
      ADD_FAILURE() << software << ": a fixed dualpipev was planned";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("DualPipe-V not offered"), std::string::npos)
          << e.what();
    }
    const std::vector<std::string> lines = software_lines(r.hardware);
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& s) {
      return s.find("DualPipe-V not offered") != std::string::npos;
    })) << software;
  }
  PlanRequest mesh = gpu_request(8, "meshtrain");
  mesh.pp = 2;
  const std::vector<Layout> all = enumerate_layouts(mesh);
  EXPECT_TRUE(std::any_of(all.begin(), all.end(),
                          [](const Layout& l) { return l.schedule == "dualpipev"; }));
  mesh.schedule = "dualpipev";
  EXPECT_NO_THROW(enumerate_layouts(mesh));
  const std::vector<std::string> lines = software_lines(mesh.hardware);
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& s) {
    return s.find("DualPipe-V offered") != std::string::npos;
  }));
}

}  // namespace
}  // namespace mt::plan
