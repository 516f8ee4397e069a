// `meshtrain plan` on hostile input (issue #26): sizes whose memory would wrap 64-bit
// arithmetic, device and layer counts that once crashed or ran without end, hardware files
// with NaN, negative or out-of-type figures, and FIFOs named as input files. Each answers
// with exit 2 and one line, or with a sane plan; none prints a wrapped or non-finite number.
// The cases that run the binary are PlanCommand's (labelled binary in tests/CMakeLists.txt).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/run_binary.h"
#include "plan/memory_bounds.h"
#include "plan/model_flops.h"
#include "plan/profile_fields.h"
#include "plan/search.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

using mt::testing::run_command;
using mt::testing::RunResult;
using mt::testing::TempDir;
using testing::small_request;

const std::string kSmall = " --layers 4 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 8";

// The binary under a hang guard: a blocked reader fails the test (exit 124), never hangs it.
// 180 s: the largest request here (dim 65536, seq 1M on 64 GPUs) searches cp under the
// default software since issue #30's second stop, about 21 s of CPU (11 s before), which a
// loaded 2-core host stretched past the former 60 s.
RunResult plan(const std::string& args) {
  return run_command("timeout 180 " + std::string(MESHTRAIN_BIN) + " plan " + args);
}

// negative_ok: the message may quote a negative value the user gave.
void expect_one_line_refusal(const RunResult& r, const std::string& args, const std::string& says,
                             bool negative_ok = false) {
  EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
  EXPECT_EQ(r.err.rfind("meshtrain: error: ", 0), 0u) << args << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << args << ": " << r.err;
  EXPECT_TRUE(negative_ok || !std::regex_search(r.err, std::regex(" -[0-9]")))
      << args << ": a negative figure: " << r.err;
}

TEST(PlanCommand, SizesBeyondSixtyFourBitsDoNotFitAndNeverWrap) {
  for (const std::string args :
       {"--hardware a100-80gb --gpus 8 --layers 4 --dim 64 --heads 4 --seq 2000000000 --vocab 256",
        "--hardware a100-80gb --gpus 8 --layers 4 --dim 500000000 --heads 4 --seq 32 --vocab 256"})
    expect_one_line_refusal(plan(args), args, "no layout fits in memory");
  const std::string wide =
      "--hardware a100-80gb --gpus 8" + std::string(kSmall) + " --dim 2000000000";
  expect_one_line_refusal(plan(wide), wide, "--dim must be at most 536870911");
}

// A request near the 64-bit edge on 64 GPUs. Its whole search is labelled full
// (tests/CMakeLists.txt): it takes about 14 s of CPU, nearly all in the dry model each
// considered layout builds for its memory (ModelChunk::sequence_context fills the 1M
// positions, and under cp every cp rank's zigzag positions, once per layout). The default
// suite plans the same request with cp and tp fixed (8 x 8), a few layouts.
const std::string kSixtyFourGpus =
    "--hardware h100-80gb --gpus 64 --layers 8 --dim 65536 --heads 64 --seq 1048576 --vocab 256 "
    "--batch 64 --precision bf16";

TEST(PlanCommand, SixtyFourGpusNearTheEdgeDoNotFitAndNeverWrap) {
  const std::string args = kSixtyFourGpus + " --cp 8 --tp 8";
  expect_one_line_refusal(plan(args), args, "no layout fits in memory");
}

TEST(PlanCommand, SixtyFourGpusNearTheEdgeWholeSearchDoesNotFitAndNeverWraps) {
  expect_one_line_refusal(plan(kSixtyFourGpus), kSixtyFourGpus, "no layout fits in memory");
}

TEST(PlanLimits, ALayoutTooLargeToCountGetsItsLowerBound) {
  PlanRequest r = small_request(8);
  r.hardware = preset_profile("a100-80gb");
  r.model.seq = 2000000000;
  const Layout l{1, 4, 2, 1, 1, 0, true, Recompute::full, 1, "1f1b", Precision::bf16};
  const Schedule s = make_schedule("1f1b", 2, 8, 1);
  const MemoryBounds b = memory_bounds(r, l, s);
  EXPECT_GT(b.upper, kMaxEstimateBytes);
  const PlannedMemory m = planned_memory(r, l, s);
  EXPECT_TRUE(m.lower_bound);
  for (int64_t part : {m.params, m.grads, m.optimizer, m.activations, m.buffers})
    EXPECT_GE(part, 0);
  EXPECT_GT(m.total(), usable_bytes_per_rank(r));
  EXPECT_GE(double(m.total()), double(b.lower()) * (1 - 1e-12));
}

// The bounds enclose the engine's estimate for every kind of layout the search visits, so
// that "too large to count" is only ever said of layouts that cannot fit.
TEST(PlanLimits, MemoryBoundsEncloseTheEstimate) {
  std::vector<PlanRequest> requests;
  PlanRequest gpu = small_request(8);
  gpu.hardware = preset_profile("a100-80gb");
  requests.push_back(gpu);
  PlanRequest moe = small_request(4);
  moe.model.experts = 4;
  requests.push_back(moe);
  PlanRequest local = small_request(4);
  local.precision = Precision::bf16;
  requests.push_back(local);
  PlanRequest deep = small_request(8);
  deep.model.layers = 16;
  deep.batch = 32;
  requests.push_back(deep);
  int checked = 0;
  for (const PlanRequest& r : requests)
    for (const Layout& l : enumerate_layouts(r)) {
      try {
        validate_candidate(r, l);
      } catch (const UsageError&) {
        continue;
      }
      const Schedule s = l.pp > 1
                             ? make_schedule(l.schedule, l.pp, microbatches(r, l), l.virtual_stages)
                             : Schedule{};
      const PlannedMemory m = planned_memory(r, l, s);
      const MemoryBounds b = memory_bounds(r, l, s);
      ASSERT_FALSE(m.lower_bound);
      EXPECT_LE(b.lower(), double(m.total())) << train_command(r, l);
      EXPECT_GE(b.upper, double(m.total())) << train_command(r, l);
      ++checked;
    }
  EXPECT_GT(checked, 500);
}

TEST(PlanCommand, HugeDeviceAndLayerCountsAnswerAtOnce) {
  // 2^31 - 1 devices once divided by zero in the divisor loop (SIGFPE); 2e9 layers ran for
  // minutes. Both now answer at once: an error naming what to change, never a signal.
  for (const std::string& args : {"--hardware a100-80gb --gpus 2147483647" + kSmall,
                                  "--hardware a100-80gb --gpus 2147483646" + kSmall})
    expect_one_line_refusal(plan(args), args, "must be divisible by --dp x --micro-batch");
  // A billion devices with a batch to match: a plan, every figure finite and positive.
  const RunResult big = plan(
      "--hardware a100-80gb --gpus 1073741824 --layers 4 --dim 64 --heads 4 --seq 32 --vocab 256 "
      "--batch 1073741824 --json --top 3");
  ASSERT_EQ(big.exit_code, 0) << big.err;
  for (const auto& c : nlohmann::json::parse(big.out).at("candidates"))
    for (const char* k : {"step_time_s", "tokens_per_s", "mfu"}) {
      const double v = c.at("predicted").at(k);
      EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " " << v;
    }
  const std::string deep =
      "--hardware a100-80gb --gpus 8 --layers 2000000000 --dim 64 --heads 4 "
      "--seq 32 --vocab 256 --batch 8";
  expect_one_line_refusal(plan(deep), deep, "the layout search is too large to answer");
}

// The plan's header counts the parameters in floating point: a model the planner accepts may
// have more than 2^63 of them (split over a billion devices).
TEST(PlanLimits, TheHeaderCountsParametersWithoutWrapping) {
  ModelConfig m = small_request(1).model;
  EXPECT_EQ(model_params(m), double(m.num_params()));
  EXPECT_EQ(describe_model(m), m.describe());
  m.experts = 8;
  EXPECT_EQ(model_params(m), double(m.num_params()));
  m.experts = 0;
  m.dim = m.heads = 1 << 25;
  m.layers = 1024;
  EXPECT_GT(model_params(m), 9.3e18);
  EXPECT_EQ(describe_model(m).find('-'), std::string::npos) << describe_model(m);
}

TEST(PlanLimits, TheSearchStopsAtItsWorkBound) {
  PlanRequest r = small_request(8);
  r.hardware = preset_profile("a100-80gb");
  r.model.layers = 2000000000;
  EXPECT_THROW(search_layouts(r), UsageError);
  WorkBudget budget("test", 100);
  budget.charge(60);
  EXPECT_THROW(budget.charge(60), UsageError);
}

// A valid GPU hardware file with `extra` ("key = value") added or replacing that key.
std::string gpu_file(const std::string& extra) {
  const std::string key = extra.substr(0, extra.find(' '));
  std::string out = "[hardware]\n";
  for (const std::string line :
       {"name = \"x\"", "memory_bytes = 8e10", "peak_fp32 = 1.56e14", "peak_bf16 = 3.12e14",
        "memory_bw = 1.7e12", "intra_busbw = 2.3e11", "p2p_bw_intra = 2.4e11"})
    if (line.substr(0, line.find(' ')) != key) out += line + "\n";
  return out + extra + "\n";
}

TEST(PlanLimits, EveryHardwareFieldIsRangeChecked) {
  EXPECT_NO_THROW(parse_profile_toml(gpu_file(""), "ok.toml"));
  for (const auto& [extra, key] : std::vector<std::pair<std::string, std::string>>{
           {"max_zero = 4294967296", "max_zero"},
           {"max_zero = 4", "max_zero"},
           {"cores = 2.5", "cores"},
           {"devices_per_node = 0", "devices_per_node"},
           {"devices_per_node = 4294967304", "devices_per_node"},
           {"memory_bw = nan", "memory_bw"},
           {"memory_bw = -1.7e12", "memory_bw"},
           {"memory_bw = 1e-300", "memory_bw"},
           {"intra_latency_s = inf", "intra_latency_s"},
           {"inter_latency_s = -1e-6", "inter_latency_s"},
           {"kernel_overhead_s = nan", "kernel_overhead_s"},
           {"gemm_efficiency = 0", "gemm_efficiency"},
           {"dp_overlap = 1.5", "dp_overlap"},
           {"optimizer_bytes = -32", "optimizer_bytes"},
           {"parallel_efficiency = nan", "parallel_efficiency"},
           {"step_factor_fp32 = -1", "step_factor_fp32"},
           {"moe_fwd_s = inf", "moe_fwd_s"},
           {"dropout = 1", "dropout"},
           {"name = 3", "name"},
           {"sources = \"one line\"", "sources"},
           {"peak_bf16 = -3e14", "peak_bf16"}}) {
    try {
      parse_profile_toml(gpu_file(extra), "bad.toml");
      ADD_FAILURE() << extra << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("[hardware] " + key), std::string::npos)
          << extra << ": " << e.what();
    }
  }
  // The presets and every software profile are within the ranges they are checked against.
  for (const std::string& name : preset_names())
    for (const std::string& software : software_names()) {
      HardwareProfile h = preset_profile(name);
      apply_software(h, software);
      EXPECT_EQ(profile_field_error(h), "") << name << " " << software;
    }
  EXPECT_EQ(profile_field_error(testing::synthetic_local()), "");
}

TEST(PlanCommand, ABadHardwareFileIsOneLineExit2) {
  TempDir dir;
  const std::string file = dir / "hw.toml";
  for (const std::string extra : {"peak_fp32 = nan", "memory_bw = -1", "max_zero = 4294967296"}) {
    std::ofstream(file) << gpu_file(extra);
    const std::string args = "--hardware-file " + file + " --gpus 8" + kSmall;
    expect_one_line_refusal(plan(args), args, extra.substr(0, extra.find(' ')), true);
  }
}

TEST(PlanLimits, ProfilesRoundTripThroughTheRegistry) {
  HardwareProfile h = testing::synthetic_local();
  h.moe_load_cv = 0.5;
  h.sources = {"a \"quoted\" line"};
  const HardwareProfile back = parse_profile_toml(profile_to_toml(h), "local.toml");
  for (const ProfileField& f : profile_fields()) {
    if (auto* d = std::get_if<double HardwareProfile::*>(&f.member)) {
      EXPECT_NEAR(back.*(*d), h.*(*d), 1e-8 * std::abs(h.*(*d))) << f.key;
    } else if (auto* i = std::get_if<int HardwareProfile::*>(&f.member)) {
      EXPECT_EQ(back.*(*i), h.*(*i)) << f.key;
    } else if (auto* b = std::get_if<bool HardwareProfile::*>(&f.member)) {
      EXPECT_EQ(back.*(*b), h.*(*b)) << f.key;
    }
  }
  EXPECT_EQ(back.name, h.name);
  EXPECT_EQ(back.sources, std::vector<std::string>{"a 'quoted' line"});
}

TEST(PlanCommand, AConfigIntegerIsNeverNarrowed) {
  TempDir dir;
  const std::string file = dir / "c.toml";
  std::ofstream(file) << "[model]\nlayers = 4294967300\ndim = 64\nheads = 4\nseq = 32\n";
  const std::string args = "--config " + file + " --hardware a100-80gb --gpus 8";
  expect_one_line_refusal(plan(args), args, "[model] layers is out of range");
  std::ofstream(file) << "[model]\nlayers = \"4\"\n";
  expect_one_line_refusal(plan(args), args, "[model] layers must be an integer");
}

// Each file a user names is read without blocking: a FIFO is refused by name at once.
TEST(PlanCommand, AFifoIsRefusedNotWaitedOn) {
  TempDir dir;
  const std::string fifo = dir / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& args : {"--hardware-file " + fifo + " --gpus 8" + kSmall,
                                  "--config " + fifo + " --hardware a100-80gb --gpus 8",
                                  "--hardware local --profile " + fifo + " --ranks 2" + kSmall,
                                  "--calibrate --calibrate-seconds 1 --profile " + fifo})
    expect_one_line_refusal(plan(args), args, fifo);
}

}  // namespace
}  // namespace mt::plan
