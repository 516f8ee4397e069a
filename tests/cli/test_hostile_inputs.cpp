// Hostile inputs found by the independent audit of issue #26 (cases the issue did not list):
// a process limit under train, flags ignored or unbounded on the smaller commands, a damaged
// checkpoint that `checkpoint verify` called ok. Each test failed on the code before its fix.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_fixture.h"
#include "train/safetensors.h"

namespace fs = std::filesystem;

namespace mt::testing {
namespace {

// Runs as user nobody under prlimit `limits` (root is exempt from process limits); "" when
// that cannot be arranged here.
std::string as_nobody(const std::string& limits) {
  if (::geteuid() != 0) return "";
  if (std::system("command -v setpriv >/dev/null && command -v prlimit >/dev/null") != 0) return "";
  return "setpriv --reuid=65534 --regid=65534 --clear-groups prlimit " + limits + " ";
}

// Threads the system refuses (ulimit -u): rank threads ended the process with SIGABRT
// ("terminate called without an active exception") and left --save's lock behind; OpenMP
// team threads ended it with libgomp's own line and exit 1, no meshtrain line.
TEST(HostileInputs, AThreadLimitUnderTrainIsOneLineNamingTheRank) {
  Fixture f;
  const std::string nobody = as_nobody("--nproc=3");
  if (nobody.empty()) GTEST_SKIP() << "cannot set a process limit here (needs root, setpriv)";
  fs::permissions(f.dir.path, fs::perms::all);
  fs::permissions(f.data, fs::perms::all);
  const std::string run = "timeout 60 " + nobody + MESHTRAIN_BIN +
                          " train --layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --steps 1 " +
                          "--quiet --data " + f.data + " --save " + (f.dir / "ck");
  for (const char* layout : {" --dp 4", " --threads 8"}) {
    const RunResult r = run_command(run + layout);
    EXPECT_EQ(r.exit_code, 1) << layout << ": " << r.err;
    EXPECT_EQ(r.err.rfind("meshtrain: error: rank ", 0), 0u) << layout << ": " << r.err;
    EXPECT_NE(r.err.find("ulimit -u"), std::string::npos) << layout << ": " << r.err;
    for (const auto& e : fs::directory_iterator(f.dir.path))
      EXPECT_EQ(e.path().filename().string().rfind("ck", 0), std::string::npos) << e.path();
  }
}

// `timeout` turns a hang into exit 124, which fails the exit-code checks.
RunResult run_bounded(const std::string& args) {
  return run_command("timeout 20 " + std::string(MESHTRAIN_BIN) + " " + args);
}

// plan took train's model flags without train's --experts range: 2^31-1 experts ran out of
// memory (exit 1, std::bad_alloc) and a million searched for minutes.
TEST(HostileInputs, PlanHasTrainsExpertRange) {
  const std::string plan = "plan --hardware a100-80gb --gpus 8 --experts ";
  for (const char* n : {"2147483647", "1000000", "4097"})
    expect_usage_error(run_bounded(plan + n), "--experts must be in 0..4096");
}

// sample --tokenizer FILE on a model of the byte tokenizer was silently ignored, even when
// FILE did not exist or was a FIFO.
TEST(HostileInputs, SampleRefusesATokenizerItWouldIgnore) {
  Fixture f;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog\n";
  std::ofstream(f.dir / "corpus.txt") << text;
  const std::string ds = f.dir / "ds", w = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain("prepare " + (f.dir / "corpus.txt") + " --out " + ds +
                          " --val-fraction 0 --quiet")
                .exit_code,
            0);
  ASSERT_EQ(run_meshtrain("train" + f.tiny + "--steps 1 --data " + ds + " --export " + w).exit_code,
            0);
  const std::string sample = "sample --init-from " + w + " --prompt a --tokens 2 --tokenizer ";
  ASSERT_EQ(::mkfifo((f.dir / "fifo.model").c_str(), 0600), 0);
  for (const std::string& t : {f.dir / "missing.model", f.dir / "fifo.model"})
    expect_usage_error(run_bounded(sample + t), "would be ignored");
  EXPECT_EQ(run_bounded("sample --init-from " + w + " --prompt a --tokens 2").exit_code, 0);
}

// sample --topk (experts per token) on a dense model changed nothing and said nothing; it is
// refused there, from a weights file and from a checkpoint alike. (--top-k is the sampling
// option, honoured for every model.)
TEST(HostileInputs, SampleRefusesExpertsPerTokenOnADenseModel) {
  Fixture f;
  const std::string w = f.dir / "w.safetensors", ckpt = f.dir / "ckpt";
  ASSERT_EQ(run_meshtrain(f.base() + " --export " + w + " --save " + ckpt).exit_code, 0);
  for (const std::string& from : {"--init-from " + w, "--load " + ckpt})
    expect_usage_error(run_bounded("sample " + from + " --prompt a --tokens 2 --topk 2"),
                       "--topk 2 sets the experts per token of a mixture-of-experts model, but");
  const RunResult top_k =
      run_bounded("sample --init-from " + w + " --prompt a --tokens 2 --top-k 3");
  EXPECT_EQ(top_k.exit_code, 0) << top_k.err;
}

// sample and prepare read --seed through CLI11, which wrapped -1 to 2^64-1 and saturated a
// number beyond 64 bits; train refused both. Every --seed is range-checked alike now.
TEST(HostileInputs, EverySeedIsRangeChecked) {
  Fixture f;
  const std::string w = f.dir / "w.safetensors";
  std::ofstream(f.dir / "corpus.txt") << "one line of text\nand another\n";
  const std::vector<std::string> commands = {
      "sample --load " + (f.dir / "nothing") + " --prompt a --seed ",
      "prepare " + (f.dir / "corpus.txt") + " --out " + (f.dir / "ds") + " --seed "};
  for (const std::string& c : commands) {
    expect_usage_error(run_bounded(c + "-1"), "--seed must be an integer in 0..");
    expect_usage_error(run_bounded(c + "18446744073709551616"), "--seed must be in 0..");
  }
  EXPECT_FALSE(fs::exists(f.dir / "ds"));
}

// Overwrites the first float of `tensor` in a safetensors file with `value`.
void poke_first_float(const std::string& path, const std::string& tensor, float value) {
  const SafetensorsFile f(path);
  uint64_t header = 0;
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header), 8);
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(std::streamoff(8 + header + f.tensor(tensor).begin));
  io.write(reinterpret_cast<const char*>(&value), sizeof value);
}

// export --from CHECKPOINT --export-dtype bf16 of a value bf16 cannot hold (3.4e38 rounds to
// Inf) was exit 1 from the writer's gate, where a NaN in the same checkpoint is exit 2: both
// are the input's, known before anything is written.
TEST(HostileInputs, ACheckpointValueBf16CannotHoldIsBadInput) {
  Fixture f;
  const std::string w = f.dir / "w.safetensors", ck = f.dir / "ck", out = f.dir / "out";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 1 --export " + w).exit_code, 0);
  poke_first_float(w, "transformer.h.0.ln_1.bias", 3.4e38f);
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 0 --init-from " + w + " --save " + ck +
                          " --checkpoint-format sharded")
                .exit_code,
            0);
  const std::string from = "export --from " + ck + "/step_000000 --export-dtype bf16 ";
  expect_usage_error(run_meshtrain(from + "--to " + out + ".safetensors"), "rounds to inf in bf16");
  EXPECT_FALSE(fs::exists(out + ".safetensors"));
  EXPECT_EQ(
      run_meshtrain("export --from " + ck + "/step_000000 --to " + out + ".safetensors").exit_code,
      0);
}

// prepare --tokenizer bpe --vocab-size 2147483647 trained for minutes on a few KB of text.
TEST(HostileInputs, ATrainedVocabularyHasABound) {
  Fixture f;
  std::ofstream(f.dir / "corpus.txt") << "one line of text\nand another\n";
  const std::string prep = "prepare " + (f.dir / "corpus.txt") + " --out " + (f.dir / "ds") +
                           " --val-fraction 0 --tokenizer bpe --vocab-size ";
  for (const char* n : {"2147483647", "4194305"})
    expect_usage_error(run_bounded(prep + n), "is too large");
  EXPECT_FALSE(fs::exists(f.dir / "ds"));
}

// `schedule` had no bound on its sizes (--pp 2147483647: std::bad_alloc, exit 1; --pp 64
// --microbatches 65536: no answer in 20 s), and costs that add up beyond a double printed
// "makespan: inf" and "bubble: -nan%" with exit 0.
TEST(HostileInputs, ScheduleAnswersAtOnceOrRefuses) {
  expect_usage_error(run_bounded("schedule --pp 2147483647"), "--pp must be in 1..1024");
  for (const char* a : {"--pp 64 --microbatches 65536", "--microbatches 2147483647",
                        "--schedule interleaved --virtual-stages 2147483647"})
    expect_usage_error(run_bounded(std::string("schedule ") + a), "cells, more than the 65536");
  for (const char* a : {"--costs 1e308,1e308,1e308", "--latency 1e308"})
    expect_usage_error(run_bounded(std::string("schedule ") + a), "makespan inf");
  EXPECT_EQ(run_bounded("schedule --pp 4 --microbatches 8").exit_code, 0);
}

}  // namespace
}  // namespace mt::testing
