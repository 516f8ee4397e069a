// End-to-end behaviour of `meshtrain train` that users and scripts rely on.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "data/token_shard.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/matmul_bf16.h"
#include "run_binary.h"
#include "train/safetensors.h"

namespace mt {
namespace {

using testing::run_meshtrain;
using testing::slurp;
using testing::TempDir;

std::vector<nlohmann::json> step_records(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::istringstream in(slurp(path));
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("event")) out.push_back(j);
    }
  return out;
}

struct Data {
  TempDir dir;
  std::string path = dir / "train.bin";
  Data() {
    std::vector<int> tokens;
    for (int i = 0; i < 5000; ++i) tokens.push_back((i * i + 3 * i) % 97);
    write_token_shard(path, tokens);
  }
};

const char* kSmall = " --layers 2 --dim 32 --heads 4 --seq 16 --batch 4 --quiet ";

TEST(TrainCommand, MetricsHaveTheContractKeys) {
  Data d;
  auto r = run_meshtrain(std::string("train") + kSmall + "--steps 3 --data " + d.path +
                         " --metrics " + (d.dir / "m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto recs = step_records(d.dir / "m.jsonl");
  ASSERT_EQ(recs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(recs[i]["step"], i + 1);
    for (const char* k : {"loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mfu"})
      EXPECT_TRUE(recs[i].contains(k)) << k;
  }
  // A memory record per rank.
  EXPECT_NE(slurp(d.dir / "m.jsonl").find("\"event\":\"memory\""), std::string::npos);
}

// --peak-gflops is the denominator of mfu: mfu x peak / tokens_per_s is the model's FLOPs
// per token over the threads, the same figure whatever peak is given.
TEST(TrainCommand, PeakGflopsIsTheMfuDenominator) {
  Data d;
  std::vector<double> per_token;
  for (const char* peak : {"2", "50"}) {
    const std::string m = d.dir / (std::string("m") + peak + ".jsonl");
    auto r = run_meshtrain(std::string("train") + kSmall + "--steps 2 --threads 2 --data " +
                           d.path + " --metrics " + m + " --peak-gflops " + peak);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& rec : step_records(m))
      per_token.push_back(rec["mfu"].get<double>() * std::stod(peak) /
                          rec["tokens_per_s"].get<double>());
  }
  ASSERT_EQ(per_token.size(), 4u);
  for (double x : per_token) EXPECT_NEAR(x / per_token[0], 1.0, 1e-6);
}

// Under --pp: bubble and its theory every step, and each rank's activation peak in
// microbatches as the schedule implies (gpipe holds all m; 1f1b stage s holds p - s).
TEST(TrainCommand, PipelineMetricsAndInFlightPeak) {
  Data d;
  for (const std::string sched : {"gpipe", "1f1b"}) {
    const std::string m = d.dir / (sched + ".jsonl");
    auto r = run_meshtrain(std::string("train") + kSmall + "--steps 2 --pp 2 --microbatches 4 " +
                           "--schedule " + sched + " --data " + d.path + " --metrics " + m);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& rec : step_records(m)) {
      EXPECT_GE(rec["bubble"].get<double>(), 0.0);
      EXPECT_LT(rec["bubble"].get<double>(), 1.0);
      EXPECT_NEAR(rec["bubble_theory"].get<double>(), 1.0 / 5.0, 1e-12);  // (p-1)/(m+p-1)
    }
    std::istringstream in(slurp(m));
    std::string line;
    std::vector<int> peak;
    while (std::getline(in, line))
      if (line.find("\"memory\"") != std::string::npos)
        peak.push_back(nlohmann::json::parse(line)["microbatches_in_flight_peak"].get<int>());
    const std::vector<int> want =
        sched == "gpipe" ? std::vector<int>{4, 4} : std::vector<int>{2, 1};
    EXPECT_EQ(peak, want) << sched;
  }
}

// The memory line's in-flight count is the executor's: whole microbatches under one chunk
// per stage, (microbatch, chunk) pairs under two or more, which DualPipe-V's line names as
// the V's two chunks (it read "5 microbatches in flight" for 5 pairs, 2.5 stage-microbatches).
TEST(TrainCommand, TheMemoryLineSaysWhatItsInFlightCountCounts) {
  Data d;
  const std::string base =
      "train --layers 4 --dim 32 --heads 4 --seq 16 --batch 4 --steps 1 "
      "--pp 2 --microbatches 4 --progress none --data " +
      d.path;
  auto r = run_meshtrain(base + " --schedule dualpipev");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" (microbatch, chunk) pairs in flight on the V's down and up chunks, each "
                       "half of the rank's layers)"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("microbatches in flight"), std::string::npos) << r.out;
  r = run_meshtrain(base + " --schedule interleaved --virtual-stages 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" (microbatch, chunk) pairs in flight, each 1/2 of the rank's layers)"),
            std::string::npos)
      << r.out;
  r = run_meshtrain(base + " --schedule 1f1b");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("activations"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" microbatches in flight)"), std::string::npos) << r.out;
}

// --precision bf16: the start line names oneDNN's bf16 kernel, the memory record gains
// precision, gemm_isa and bf16_weight_bytes (an fp32 record is as before, without them).
TEST(TrainCommand, Bf16RunNamesItsGemmIsaAndWeightCopies) {
  Data d;
  if (!mt::bf16_matmul_supported()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU";
  const std::string m = d.dir / "bf16.jsonl", f = d.dir / "fp32.jsonl";
  auto r = run_meshtrain(
      "train --layers 2 --dim 32 --heads 4 --seq 16 --batch 4 --vocab 256 --steps 2 "
      "--precision bf16 --data " +
      d.path + " --metrics " + m);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string isa = mt::dense_bf16_isa(mt::dense_bf16_default_path(1));  // --threads 1
  EXPECT_NE(r.out.find("bf16 (" + isa + ")"), std::string::npos) << r.out;
  auto q = run_meshtrain(std::string("train") + kSmall + "--steps 2 --data " + d.path +
                         " --metrics " + f);
  ASSERT_EQ(q.exit_code, 0) << q.err;
  for (const std::string& path : {m, f}) {
    std::istringstream in(slurp(path));
    int records = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"memory\"") == std::string::npos) continue;
      ++records;
      const auto j = nlohmann::json::parse(line);
      if (path == f) {
        EXPECT_FALSE(j.contains("precision") || j.contains("gemm_isa")) << line;
        continue;
      }
      EXPECT_EQ(j["precision"], "bf16");
      EXPECT_EQ(j["gemm_isa"], isa);
      // 2 blocks x 12 C^2 + the tied head's V x C, in two packs of two bytes each
      // (kernels/dense_gemm_bf16.h: counted whatever the CPU).
      EXPECT_EQ(j["bf16_weight_bytes"].get<int64_t>(), 4 * (2 * 12 * 32 * 32 + 256 * 32));
    }
    EXPECT_EQ(records, 1) << path;
  }
}

TEST(TrainCommand, SameCommandTwiceIsBitwiseIdentical) {
  Data d;
  std::string args = std::string("train") + kSmall + "--steps 5 --microbatches 2 --data " + d.path;
  auto a = run_meshtrain(args + " --metrics " + (d.dir / "a.jsonl"));
  auto b = run_meshtrain(args + " --metrics " + (d.dir / "b.jsonl"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto ra = step_records(d.dir / "a.jsonl"), rb = step_records(d.dir / "b.jsonl");
  ASSERT_EQ(ra.size(), 5u);
  ASSERT_EQ(rb.size(), 5u);
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i]["loss"].get<double>(), rb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(ra[i]["grad_norm"].get<double>(), rb[i]["grad_norm"].get<double>());
  }
}

TEST(TrainCommand, ResumeGivesTheSameLossesAsNotStopping) {
  Data d;
  // A constant schedule so a 3-step run and the first 3 steps of a 6-step run agree.
  std::string args = std::string("train") + kSmall + "--lr-schedule constant --data " + d.path;
  auto full = run_meshtrain(args + " --steps 6 --metrics " + (d.dir / "full.jsonl"));
  auto first = run_meshtrain(args + " --steps 3 --save " + (d.dir / "ck") + " --metrics " +
                             (d.dir / "first.jsonl"));
  auto second = run_meshtrain(args + " --steps 6 --load " + (d.dir / "ck") + " --metrics " +
                              (d.dir / "second.jsonl"));
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto rf = step_records(d.dir / "full.jsonl");
  auto r1 = step_records(d.dir / "first.jsonl");
  auto r2 = step_records(d.dir / "second.jsonl");
  ASSERT_EQ(r1.size(), 3u);
  ASSERT_EQ(r2.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r1[i]["loss"].get<double>(), rf[i]["loss"].get<double>());
    EXPECT_EQ(r2[i]["step"], i + 4);
    EXPECT_EQ(r2[i]["loss"].get<double>(), rf[i + 3]["loss"].get<double>()) << "step " << i + 4;
  }
}

TEST(TrainCommand, ConfigFileAndFlagOverride) {
  Data d;
  {
    std::ofstream out(d.dir / "c.toml");
    out << "[model]\nlayers = 3\ndim = 32\nheads = 4\n[train]\nlr = 0.002\nsteps = 9\n";
  }
  auto r = run_meshtrain("train --config " + (d.dir / "c.toml") + " --steps 4 --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("layers = 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lr = 0.002"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("steps = 4"), std::string::npos) << r.out;  // the flag wins
  EXPECT_NE(r.out.find("recompute = 'none'"), std::string::npos) << r.out;
  // The TOML key, and the flag over it.
  {
    std::ofstream out(d.dir / "r.toml");
    out << "[train]\nrecompute = \"full\"\n";
  }
  r = run_meshtrain("train --config " + (d.dir / "r.toml") + " --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("recompute = 'full'"), std::string::npos) << r.out;
  r = run_meshtrain("train --config " + (d.dir / "r.toml") +
                    " --recompute selective --print-config");
  EXPECT_NE(r.out.find("recompute = 'selective'"), std::string::npos) << r.out;
}

TEST(TrainCommand, HelpDocumentsEveryContractFlag) {
  auto r = run_meshtrain("train --help");
  ASSERT_EQ(r.exit_code, 0);
  for (const char* flag : {"--layers",
                           "--dim",
                           "--heads",
                           "--seq",
                           "--vocab",
                           "--experts",
                           "--topk",
                           "--capacity-factor",
                           "--aux-loss-coef",
                           "--moe-every",
                           "--router-bias-update",
                           "--dp",
                           "--tp",
                           "--pp",
                           "--ep",
                           "--microbatches",
                           "--schedule",
                           "--virtual-stages",
                           "--zero",
                           "--sequence-parallel",
                           "--steps",
                           "--batch",
                           "--lr",
                           "--min-lr",
                           "--warmup",
                           "--lr-schedule",
                           "--weight-decay",
                           "--grad-clip",
                           "--beta1",
                           "--beta2",
                           "--eps",
                           "--seed",
                           "--threads",
                           "--peak-gflops",
                           "--eval-every",
                           "--eval-batches",
                           "--recompute",
                           "--precision",
                           "--export-dtype",
                           "--data",
                           "--val-data",
                           "--init-from",
                           "--export",
                           "--save",
                           "--save-every",
                           "--load",
                           "--metrics",
                           "--trace",
                           "--backend",
                           "--timeout",
                           "--config",
                           "--print-config"})
    EXPECT_NE(r.out.find(std::string(flag) + " "), std::string::npos) << flag;
}

TEST(TrainCommand, VersionAndTopLevelHelp) {
  auto v = run_meshtrain("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.out.find("meshtrain "), std::string::npos);
  auto h = run_meshtrain("--help");
  EXPECT_EQ(h.exit_code, 0);
  for (const char* cmd : {"train", "sample", "bench"})
    EXPECT_NE(h.out.find(cmd), std::string::npos);
}

TEST(TrainCommand, ExportThenSampleRoundTrip) {
  Data d;
  const std::string w = d.dir / "w.safetensors";
  auto r = run_meshtrain(std::string("train") + kSmall + "--steps 2 --data " + d.path +
                         " --export " + w);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = run_meshtrain("sample --init-from " + w + " --prompt hello --tokens 20");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out.rfind("hello", 0), 0u);
  EXPECT_GE(s.out.size(), 5u + 20u);
}

// A mixture-of-experts model samples from its checkpoint and from its exported weights:
// the file records what the tensors do not say (top-k, the capacity factor), and a
// checkpoint's router biases come back with it.
TEST(TrainCommand, MixtureOfExpertsSamplesFromCheckpointAndExport) {
  Data d;
  const std::string ck = d.dir / "ck", w = d.dir / "moe.safetensors";
  auto r = run_meshtrain(
      "train --layers 2 --dim 16 --heads 2 --seq 8 --batch 2 --steps 2 --experts 4 --topk 2 "
      "--router-bias-update 0.01 --quiet --data " +
      d.path + " --save " + ck + " --export " + w);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto meta = SafetensorsFile(w).metadata();
  EXPECT_EQ(meta.at("experts"), "4");
  EXPECT_EQ(meta.at("topk"), "2");
  EXPECT_EQ(meta.at("moe_every"), "1");
  EXPECT_EQ(meta.at("capacity_factor"), "0");
  for (const std::string& from : {"--load " + ck, "--init-from " + w}) {
    auto s = run_meshtrain("sample " + from + " --prompt hi --tokens 5");
    ASSERT_EQ(s.exit_code, 0) << from << ": " << s.err;
    EXPECT_EQ(s.out.rfind("hi", 0), 0u) << s.out;
    EXPECT_GE(s.out.size(), 2u + 5u) << s.out;
  }
  // The file decides the shape: no --experts needed to continue from it.
  auto t =
      run_meshtrain("train --quiet --batch 2 --steps 1 --data " + d.path + " --init-from " + w);
  EXPECT_EQ(t.exit_code, 0) << t.err;
  // Blocks 1 and 3 of 4: --moe-every comes back from where the routers are.
  const std::string w2 = d.dir / "every2.safetensors";
  r = run_meshtrain(
      "train --layers 4 --dim 16 --heads 2 --seq 8 --batch 2 --steps 1 --experts 2 --topk 1 "
      "--moe-every 2 --capacity-factor 1.25 --quiet --data " +
      d.path + " --export " + w2);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(SafetensorsFile(w2).metadata().at("capacity_factor"), "1.25");
  auto s = run_meshtrain("sample --init-from " + w2 + " --tokens 5");
  EXPECT_EQ(s.exit_code, 0) << s.err;
}

TEST(TrainCommand, TraceIsChromeJson) {
  Data d;
  auto r = run_meshtrain(std::string("train") + kSmall + "--steps 2 --data " + d.path +
                         " --trace " + (d.dir / "t.json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(slurp(d.dir / "t.json"));
  ASSERT_TRUE(j.contains("traceEvents"));
  EXPECT_GT(j["traceEvents"].size(), 2u);
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// A short real run on the embedded fortunes corpus: the validation loss must fall well below
// ln(256) = 5.55, the loss of a model that knows nothing about bytes.
TEST(TrainCommand, LearnsTheEmbeddedCorpus) {
  TempDir d;
  auto r = run_meshtrain(
      "train --layers 2 --dim 128 --heads 4 --seq 64 --batch 16 --steps 120 --lr 0.003 "
      "--min-lr 0.0003 --warmup 10 "
      "--eval-every 120 --eval-batches 4 --quiet --metrics " +
          (d / "m.jsonl"),
      d.path.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  double val = -1;
  for (const auto& rec : step_records(d / "m.jsonl"))
    if (rec.contains("val_loss")) val = rec["val_loss"].get<double>();
  ASSERT_GT(val, 0) << "no val_loss in the metrics";
  EXPECT_LT(val, 3.0) << "validation loss " << val << " is not well below ln(256) = 5.55";
}

}  // namespace
}  // namespace mt
