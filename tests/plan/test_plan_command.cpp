// `meshtrain plan` as a user runs it: the table, the JSON schema, bad input (one line,
// exit 2), --calibrate into a profile that --hardware local and train --auto-layout read.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/run_binary.h"

namespace mt {
namespace {

using testing::run_meshtrain;
using testing::TempDir;

const char* kSmall = "--layers 4 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 8";

TEST(PlanCommand, JsonHasTheIssuesSchemaBestFirst) {
  const auto r = run_meshtrain(std::string("plan ") + kSmall +
                               " --hardware a100-80gb --gpus 8 --json --top 5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& list = j.at("candidates");
  ASSERT_EQ(list.size(), 5u);
  double prev = 0;
  for (const auto& c : list) {
    for (const char* k : {"dp", "tp", "pp", "virtual_stages", "ep", "zero", "sequence_parallel",
                          "recompute", "micro_batch", "schedule", "precision"})
      EXPECT_TRUE(c.at("layout").contains(k)) << k;
    const auto& p = c.at("predicted");
    for (const char* k :
         {"step_time_s", "tokens_per_s", "model_tflops_per_device", "mfu", "bubble", "fits"})
      EXPECT_TRUE(p.contains(k)) << k;
    for (const char* k : {"params", "grads", "optimizer", "activations", "buffers", "total"})
      EXPECT_TRUE(p.at("memory_bytes").contains(k)) << k;
    EXPECT_TRUE(p.at("fits").get<bool>());
    EXPECT_GE(p.at("step_time_s").get<double>(), prev);
    prev = p.at("step_time_s").get<double>();
  }
}

TEST(PlanCommand, TableAndExplain) {
  const auto r = run_meshtrain(std::string("plan ") + kSmall +
                               " --hardware h100-80gb --gpus 4 --tp 2 --explain --top 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("run #1: mpirun -np 4 meshtrain train"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("assumptions:"), std::string::npos);
  EXPECT_NE(r.out.find("#1 vs #2"), std::string::npos);
  EXPECT_NE(r.out.find("H100 SXM datasheet"), std::string::npos);
}

TEST(PlanCommand, CompareShowsLayoutsSideBySide) {
  const std::string base =
      std::string("plan ") + kSmall +
      " --hardware h100-80gb --gpus 4 --compare tp=4 --compare dp=4,zero=3 --compare pp=2";
  const auto r = run_meshtrain(base);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* row :
       {"ratio to the best", "compute (incl. recompute)", "tp comm exposed", "cp comm exposed",
        "ep comm exposed", "ZeRO-3 gathers exposed", "pipeline bubble", "dp reduction exposed",
        "activations", "buffers", "run #3: mpirun -np 4 meshtrain train"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  EXPECT_NE(r.out.find("1.000x"), std::string::npos) << r.out;
  const auto j = run_meshtrain(base + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto list = nlohmann::json::parse(j.out).at("compare");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].at("layout").at("tp"), 4);
  EXPECT_EQ(list[1].at("layout").at("zero"), 3);
  EXPECT_EQ(list[2].at("layout").at("pp"), 2);
  double best = 1e300;
  for (const auto& c : list) best = std::min(best, c.at("ratio_to_best").get<double>());
  EXPECT_DOUBLE_EQ(best, 1.0);
  EXPECT_TRUE(list[1].at("breakdown_s").contains("zero3"));
  // One layout, or a bad SPEC: one line, exit 2.
  for (const char* bad :
       {" --compare tp=4", " --compare tp=4 --compare tp=3", " --compare tp=4 --compare depth=2"}) {
    const auto e =
        run_meshtrain(std::string("plan ") + kSmall + " --hardware h100-80gb --gpus 4" + bad);
    EXPECT_EQ(e.exit_code, 2) << bad;
    EXPECT_EQ(e.err.rfind("meshtrain: error: --compare", 0), 0u) << e.err;
    EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
  }
}

TEST(PlanCommand, ConfigFileGivesTheModelAndFlagsOverrideIt) {
  TempDir dir;
  const std::string file = dir / "c.toml";
  {
    std::ofstream f(file);
    f << "[model]\nlayers = 2\ndim = 64\nheads = 4\nseq = 32\nvocab = 256\n"
         "[train]\nbatch = 8\n";
  }
  const auto r =
      run_meshtrain("plan --config " + file + " --heads 8 --hardware a100-80gb --gpus 2 --top 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("GPT 2L 64d 8h seq 32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("batch 8 x seq 32"), std::string::npos) << r.out;
}

TEST(PlanCommand, BadInputIsOneLineExit2) {
  for (const std::string args :
       {" --hardware tpu --gpus 8", " --hardware a100-80gb --gpus 8 --tp 3",
        " --hardware a100-80gb --gpus 8 --dp 3", " --hardware a100-80gb",
        " --hardware a100-80gb --gpus 8 --precision fp8",
        " --hardware a100-80gb --gpus 8 --bucket-mb nan",
        " --hardware a100-80gb --gpus 8 --bucket-mb inf",
        " --hardware a100-80gb --gpus 8 --calibrate-seconds nan",
        " --hardware a100-80gb --gpus 8 --experts 4 --moe-overlap-parts 2",
        " --hardware local --gpus 2 --profile /nonexistent/profile.toml",
        " --hardware a100-80gb --gpus 8 --layers 96 --dim 12288 --heads 96 --seq 2048"}) {
    const auto r = run_meshtrain(std::string("plan ") + kSmall + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.err;
    EXPECT_EQ(r.err.rfind("meshtrain: error: ", 0), 0u) << args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << ": " << r.err;
  }
}

// DualPipe-V is planned (it was refused by name): the printed command trains the V.
TEST(PlanCommand, DualPipeVIsPlanned) {
  const auto r = run_meshtrain(
      "plan --layers 8 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 16 --hardware a100-80gb "
      "--gpus 4 --pp 4 --schedule dualpipev");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--schedule dualpipev --virtual-stages 2"), std::string::npos) << r.out;
}

TEST(PlanCommand, HardwareFileReplacesThePreset) {
  TempDir dir;
  const std::string file = dir / "hw.toml";
  {
    std::ofstream f(file);
    f << "[hardware]\nname = \"slow-cluster\"\ndevices_per_node = 4\nmemory_bytes = 1e11\n"
         "peak_fp32 = 1e13\npeak_bf16 = 2e13\nmemory_bw = 1e12\nintra_busbw = 1e11\n"
         "inter_busbw = 1e9\np2p_bw_intra = 1e11\n";
  }
  // Large enough that compute, not per-kernel overheads, decides.
  const std::string model =
      "--layers 8 --dim 1024 --heads 16 --seq 512 --vocab 1024 --batch 64 --precision bf16";
  const auto r =
      run_meshtrain("plan " + model + " --hardware-file " + file + " --gpus 8 --json --top 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double slow = nlohmann::json::parse(r.out)["candidates"][0]["predicted"]["step_time_s"];
  const auto a = run_meshtrain("plan " + model + " --hardware a100-80gb --gpus 8 --json --top 1");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_GT(slow, nlohmann::json::parse(a.out)["candidates"][0]["predicted"]["step_time_s"]);
  // An unknown key and a missing rate are one line, exit 2.
  {
    std::ofstream f(file, std::ios::app);
    f << "tensor_cores = 4\n";
  }
  const auto u =
      run_meshtrain(std::string("plan ") + kSmall + " --hardware-file " + file + " --gpus 8");
  EXPECT_EQ(u.exit_code, 2);
  EXPECT_NE(u.err.find("unknown key [hardware] tensor_cores"), std::string::npos) << u.err;
}

// The planner's line waits for every rule of the run: a run the rules refuse after the
// planner chose its layout prints its error alone (the line came first once, as --resume's
// "resuming from" did). The checked-in profile of the planner's golden file is planned with.
TEST(PlanCommand, AutoLayoutNamesItsLayoutOnlyOnceTheRulesAcceptTheRun) {
  const std::string train = std::string("MESHTRAIN_PROFILE=") + MESHTRAIN_SOURCE_DIR +
                            "/bench/planner/golden/local.toml " + MESHTRAIN_BIN +
                            " train --layers 2 --dim 32 --heads 2 --seq 16 --batch 4 --steps 1 "
                            "--auto-layout --ranks 2 --progress none";
  const auto refused = testing::run_command(train + " --save-every 2");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--save-every has no effect without --save"), std::string::npos)
      << refused.err;
  EXPECT_EQ(refused.out, "");
  const auto accepted = testing::run_command(train);
  ASSERT_EQ(accepted.exit_code, 0) << accepted.err;
  EXPECT_EQ(accepted.out.rfind("meshtrain: auto-layout: dp ", 0), 0u) << accepted.out;
}

TEST(PlanCommand, CalibrateThenPlanLocalThenTrainWithAutoLayout) {
  TempDir dir;
  const std::string profile = dir / "local.toml";
  const auto c = run_meshtrain("plan --calibrate --calibrate-seconds 2 --profile " + profile);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("wrote " + profile), std::string::npos) << c.out;
  const auto p = run_meshtrain(std::string("plan ") + kSmall +
                               " --hardware local --ranks 2 --profile " + profile + " --json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j.at("candidates").at(0).at("layout").at("precision"), "fp32");
  // The printed command trains that layout.
  std::string command = j.at("candidates").at(0).at("command");
  ASSERT_EQ(command.rfind("meshtrain train ", 0), 0u) << command;
  const auto run =
      testing::run_command(std::string(MESHTRAIN_BIN) + command.substr(9) + " --steps 1 --quiet");
  EXPECT_EQ(run.exit_code, 0) << command << ": " << run.err;
  // --backend mpi plans with the MPI figures, when the calibration could measure them.
  const bool has_mpi = testing::slurp(profile).find("mpi_busbw = 0.0") == std::string::npos;
  const auto m = run_meshtrain(std::string("plan ") + kSmall + " --hardware local --ranks 2 " +
                               "--backend mpi --json --profile " + profile);
  if (has_mpi) {
    ASSERT_EQ(m.exit_code, 0) << m.err;
    const std::string cmd = nlohmann::json::parse(m.out)["candidates"][0]["command"];
    EXPECT_EQ(cmd.rfind("mpirun -np 2 meshtrain train ", 0), 0u) << cmd;
  } else {
    EXPECT_EQ(m.exit_code, 2);
    EXPECT_NE(m.err.find("no MPI figures"), std::string::npos) << m.err;
  }
  // bf16 is planned locally from the calibrated bf16 figures (where oneDNN has a bf16
  // matmul), and the printed command trains it; a profile without them (written before
  // bf16 was calibrated) is refused with one line naming --calibrate.
  const bool has_bf16 = testing::slurp(profile).find("peak_bf16 = 0.0") == std::string::npos;
  const auto b = run_meshtrain(std::string("plan ") + kSmall + " --hardware local --ranks 2 " +
                               "--precision bf16 --json --profile " + profile);
  if (has_bf16) {
    ASSERT_EQ(b.exit_code, 0) << b.err;
    const auto bj = nlohmann::json::parse(b.out)["candidates"][0];
    EXPECT_EQ(bj["layout"]["precision"], "bf16");
    const std::string bcmd = bj["command"];
    EXPECT_NE(bcmd.find(" --precision bf16"), std::string::npos) << bcmd;
    const auto brun =
        testing::run_command(std::string(MESHTRAIN_BIN) + bcmd.substr(9) + " --steps 1 --quiet");
    EXPECT_EQ(brun.exit_code, 0) << bcmd << ": " << brun.err;
    // auto-layout plans for the precision the run uses (never searched).
    const auto ab =
        testing::run_command("MESHTRAIN_PROFILE=" + profile + " " + std::string(MESHTRAIN_BIN) +
                             " train --layers 2 --dim 32 --heads 2 --seq 16 --batch 4 "
                             "--steps 1 --auto-layout --ranks 2 --precision bf16 --progress none");
    ASSERT_EQ(ab.exit_code, 0) << ab.err;
    EXPECT_NE(ab.out.find(" bf16 (predicted"), std::string::npos) << ab.out;
  }
  {
    // The profile as it was before bf16 was calibrated: no bf16 keys, peak_bf16 0.
    std::ifstream in(profile);
    std::ofstream out(dir / "old.toml");
    for (std::string line; std::getline(in, line);) {
      if (line.find("bf16") != std::string::npos && line.rfind("sources", 0) != 0) continue;
      out << line << "\n";
    }
  }
  const auto old = run_meshtrain(std::string("plan ") + kSmall + " --hardware local --ranks 2 " +
                                 "--precision bf16 --profile " + (dir / "old.toml"));
  EXPECT_EQ(old.exit_code, 2);
  EXPECT_NE(old.err.find("no bf16 figures"), std::string::npos) << old.err;
  EXPECT_NE(old.err.find("meshtrain plan --calibrate"), std::string::npos) << old.err;
  EXPECT_EQ(std::count(old.err.begin(), old.err.end(), '\n'), 1) << old.err;
  // The old profile still plans fp32.
  EXPECT_EQ(run_meshtrain(std::string("plan ") + kSmall + " --hardware local --ranks 2 --profile " +
                          (dir / "old.toml"))
                .exit_code,
            0);
  // The calibration measures the MoE layer's rest per hidden element, the router's load
  // spread and the per-microbatch cost; MoE plans use them, and a profile without the MoE
  // figures (written before) still plans MoE. The load spread and the per-microbatch cost
  // come from training children, which a 2 s budget may leave out: then the log says so.
  {
    const std::string text = testing::slurp(profile);
    for (const auto& [key, left_out] :
         {std::pair{"moe_fwd_s = ", ""},
          {"moe_bwd_s = ", ""},
          {"moe_wgt_s = ", ""},
          {"moe_load_cv = ", "MoE load spread not measured"},
          {"microbatch_weight_s = ", "reference step (fp32): 1 of 4 microbatch counts"}}) {
      const size_t at = text.find(key);
      ASSERT_NE(at, std::string::npos) << key;
      const double value = std::stod(text.substr(at + std::string(key).size()));
      if (*left_out && value == 0)
        EXPECT_NE(c.out.find(left_out), std::string::npos) << key << c.out;
      else
        EXPECT_GT(value, 0) << key;
    }
    std::ifstream in(profile);
    std::ofstream out(dir / "old_moe.toml");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("moe_", 0) != 0) out << line << "\n";
  }
  const std::string moe_plan = std::string("plan ") + kSmall +
                               " --experts 4 --ep 2 --dp 2 --hardware local --ranks 2 --json "
                               "--profile ";
  for (const std::string& prof : {profile, dir / "old_moe.toml"}) {
    const auto mp = run_meshtrain(moe_plan + prof);
    ASSERT_EQ(mp.exit_code, 0) << prof << ": " << mp.err;
    EXPECT_GT(nlohmann::json::parse(mp.out)["candidates"][0]["predicted"]["step_time_s"], 0);
  }
  const auto a =
      testing::run_command("MESHTRAIN_PROFILE=" + profile + " " + std::string(MESHTRAIN_BIN) +
                           " train --layers 2 --dim 32 --heads 2 --seq 16 --batch 4 "
                           "--steps 1 --auto-layout --ranks 2 --tp 1 --progress none");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_NE(a.out.find("meshtrain: auto-layout: dp "), std::string::npos) << a.out;
  EXPECT_NE(a.out.find(" tp 1 "), std::string::npos) << a.out;  // --tp 1 stayed fixed
  // A fixed --cp is planned around (the local search keeps cp 1 only when cp is open) and
  // kept; a cp the model's sequence cannot take is refused before any rank starts.
  const std::string small_cp =
      "MESHTRAIN_PROFILE=" + profile + " " + std::string(MESHTRAIN_BIN) +
      " train --arch llama --layers 2 --dim 32 --heads 2 --seq 16 --batch 4 --steps 1 "
      "--auto-layout --ranks 4 --progress none ";
  const auto c2 = testing::run_command(small_cp + "--cp 2");
  ASSERT_EQ(c2.exit_code, 0) << c2.err;
  EXPECT_NE(c2.out.find(" cp 2 "), std::string::npos) << c2.out;
  const auto c4 = testing::run_command(small_cp + "--cp 4 --seq 12");
  EXPECT_EQ(c4.exit_code, 2) << c4.err;
  EXPECT_NE(c4.err.find("must be divisible by 2 x --cp = 8"), std::string::npos) << c4.err;
  EXPECT_EQ(std::count(c4.err.begin(), c4.err.end(), '\n'), 1) << c4.err;
  // --ranks without --auto-layout is a usage error.
  const auto u = run_meshtrain("train --steps 1 --ranks 2");
  EXPECT_EQ(u.exit_code, 2) << u.err;
}

}  // namespace
}  // namespace mt
