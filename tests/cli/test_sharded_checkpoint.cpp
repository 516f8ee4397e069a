// Sharded checkpoints (--checkpoint-format sharded, docs/checkpoints.md, issue #13): every
// bad input and fault of the issue is a test here, through the binary as a user runs it.
// Layout pairs (resharding) are tests/equivalence.cmake's checkpoint_reshard_* cases.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli_fixture.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/metadata_checksum.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_command;
using testing::run_meshtrain;
using testing::RunResult;
using testing::slurp;

const std::string kSharded = " --checkpoint-format sharded ";

std::string step_dir(const std::string& root, int step) {
  return root + "/" + step_dir_name(step);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

RunResult verify(const std::string& dir) {
  return run_meshtrain("checkpoint verify " + dir);
}

// A dp 2 ZeRO 1 run saving every step: two writers, moments sharded over dp.
struct Saved : Fixture {
  std::string root = dir / "ck";
  std::string layout = " --dp 2 --zero 1 ";
  Saved(int steps = 2) {
    const RunResult r = run_meshtrain(base() + layout + kSharded + "--save-every 1 --steps " +
                                      std::to_string(steps) + " --save " + root);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
};

TEST(ShardedCheckpoint, EveryRankWritesItsShardAndTheManifestVerifies) {
  Saved s;
  for (int step : {1, 2}) {
    const std::string d = step_dir(s.root, step);
    EXPECT_TRUE(fs::exists(d + "/manifest.json")) << d;
    EXPECT_TRUE(fs::exists(d + "/rank_00000.bin"));
    EXPECT_TRUE(fs::exists(d + "/rank_00001.bin"));
    EXPECT_GT(fs::file_size(d + "/rank_00001.bin"), 0u);
    const RunResult v = verify(d);
    EXPECT_EQ(v.exit_code, 0) << v.err;
    EXPECT_NE(v.out.find("ok: sharded checkpoint of step " + std::to_string(step)),
              std::string::npos)
        << v.out;
  }
  // Nothing else: no temporaries left behind.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(s.root)) entries += e.is_directory() ? 1 : 0;
  EXPECT_EQ(entries, 2);
  const auto m = nlohmann::json::parse(slurp(step_dir(s.root, 2) + "/manifest.json"));
  EXPECT_EQ(m["step"], 2);
  EXPECT_EQ(m["layout"].get<std::string>().rfind("dp 2 zero 1", 0), 0u);
}

TEST(ShardedCheckpoint, FlippedByteIsNamedWithFileAndTensor) {
  Saved s;
  const std::string d = step_dir(s.root, 2), shard = d + "/rank_00001.bin";
  std::string bytes = slurp(shard);
  bytes[bytes.size() / 2] ^= 0x04;
  write_bytes(shard, bytes);
  RunResult v = verify(d);
  expect_usage_error(v, "rank_00001.bin: block 0");
  EXPECT_NE(v.err.find("fails its checksum"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("tensor transformer."), std::string::npos) << v.err;
  expect_usage_error(run_meshtrain(s.base() + s.layout + " --steps 4 --load " + d),
                     "rank_00001.bin: block 0");
}

TEST(ShardedCheckpoint, TruncatedAndMissingShardsAreNamed) {
  Saved s;
  const std::string d = step_dir(s.root, 2);
  const std::string bytes = slurp(d + "/rank_00000.bin");
  write_bytes(d + "/rank_00000.bin", bytes.substr(0, bytes.size() - 10));
  expect_usage_error(verify(d), "rank_00000.bin: size");
  expect_usage_error(run_meshtrain(s.base() + " --steps 4 --load " + d), "truncated or replaced");
  const std::string d1 = step_dir(s.root, 1);
  fs::remove(d1 + "/rank_00001.bin");
  RunResult v = verify(d1);
  expect_usage_error(v, "rank_00001.bin: missing shard");
  EXPECT_NE(v.err.find("tensor transformer."), std::string::npos) << v.err;
}

TEST(ShardedCheckpoint, ManifestMustCoverEveryTensor) {
  Saved s;
  const std::string d = step_dir(s.root, 2);
  auto m = nlohmann::json::parse(slurp(d + "/manifest.json"));
  // Drop every segment of one tensor: its shard bytes are still there, unlisted.
  const std::string victim = "transformer.h.0.mlp.c_fc.bias.exp_avg_sq";
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& seg : m["segments"])
    if (seg["tensor"] != victim) kept.push_back(seg);
  m["segments"] = kept;
  seal_json(m);  // a deliberate edit: the coverage check holds behind the checksum
  write_bytes(d + "/manifest.json", m.dump());
  expect_usage_error(verify(d), "does not cover tensor " + victim);
  expect_usage_error(run_meshtrain(s.base() + " --steps 4 --load " + d),
                     "does not cover tensor " + victim);
}

// A manifest short of a tensor its model needs, its segments gone too and the result sealed:
// every checksum and the coverage of what it lists hold, but --load would refuse it, so
// verify does, naming the tensor (issue: verify OK must mean the load takes the files).
TEST(ShardedCheckpoint, ManifestMustListEveryTensorItsModelNeeds) {
  Saved s;
  const std::string d = step_dir(s.root, 2);
  auto m = nlohmann::json::parse(slurp(d + "/manifest.json"));
  const std::string victim = "transformer.ln_f.weight.exp_avg";
  for (const char* list : {"tensors", "segments"}) {
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& e : m[list])
      if (e.value("name", e.value("tensor", "")) != victim) kept.push_back(e);
    ASSERT_LT(kept.size(), m[list].size()) << list;
    m[list] = kept;
  }
  m.erase(kChecksumKey);
  seal_json(m);
  write_bytes(d + "/manifest.json", m.dump());
  expect_usage_error(verify(d), "lists no tensor " + victim);
  expect_usage_error(run_meshtrain(s.base() + " --steps 4 --load " + d), victim);
}

TEST(ShardedCheckpoint, AnotherModelShapeIsRefused) {
  Saved s;
  const std::string d = step_dir(s.root, 2);
  // --dim 32 where 16 was saved (heads 2 still divides it).
  std::string other = s.base();
  other.replace(other.find("--dim 16"), 8, "--dim 32");
  // Named by the run's record in the manifest (issue #31 item 2), before the tensors are read.
  expect_usage_error(run_meshtrain(other + " --steps 4 --load " + d),
                     "--dim 32 contradicts the checkpoint " + d + ", whose model has --dim 16");
}

TEST(ShardedCheckpoint, TemporaryNameIsNeverLoaded) {
  Saved s;
  const std::string d = step_dir(s.root, 2);
  fs::rename(d, d + ".tmp");
  expect_usage_error(run_meshtrain(s.base() + " --steps 4 --load " + d + ".tmp"), "temporary name");
  expect_usage_error(verify(d + ".tmp"), "temporary name");
}

// Bit-exact resume in the same layout, and export --from equal to the run's own export.
TEST(ShardedCheckpoint, SameLayoutResumeAndExportAreBitExact) {
  Fixture f;
  // A constant learning rate: a cosine schedule depends on --steps, which differs here.
  for (std::string layout : {" --dp 2 --zero 3 ", " --layers 2 --tp 2 --pp 2 --microbatches 2 "}) {
    layout += " --lr-schedule constant ";
    const std::string whole = f.dir / "whole.safetensors", resumed = f.dir / "resumed.safetensors",
                      at2 = f.dir / "at2.safetensors", exported = f.dir / "exported.safetensors";
    const std::string root = f.dir / "root";
    fs::remove_all(root);
    ASSERT_EQ(run_meshtrain(f.base() + layout + " --steps 4 --export " + whole).exit_code, 0);
    RunResult r = run_meshtrain(f.base() + layout + kSharded + " --steps 2 --save " + root +
                                " --export " + at2);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    r = run_meshtrain("export --from " + step_dir(root, 2) + " --to " + exported);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(slurp(exported) == slurp(at2)) << layout;
    r = run_meshtrain(f.base() + layout + " --steps 4 --load " + step_dir(root, 2) + " --export " +
                      resumed);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(slurp(resumed) == slurp(whole)) << layout;
  }
}

TEST(ShardedCheckpoint, ExportRefusesToWriteIntoTheCheckpoint) {
  Saved s;
  const std::string d = step_dir(s.root, 2);
  const std::string before = slurp(d + "/rank_00001.bin");
  expect_usage_error(run_meshtrain("export --from " + d + " --to " + d + "/rank_00001.bin"),
                     "inside the checkpoint");
  EXPECT_EQ(slurp(d + "/rank_00001.bin"), before);
}

// sample reads a sharded checkpoint, or the --save root of them (its newest step), as export
// --from does: the same text as from the exported file.
TEST(ShardedCheckpoint, SampleReadsItAsTheExportDoes) {
  Saved s;
  const std::string newest = step_dir(s.root, 2);
  const std::string file = s.dir / "model.safetensors";
  ASSERT_EQ(run_meshtrain("export --from " + newest + " --to " + file).exit_code, 0);
  const RunResult exported = run_meshtrain("sample --tokens 8 --init-from " + file);
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  for (const std::string& dir : {newest, s.root}) {
    const RunResult r = run_meshtrain("sample --tokens 8 --load " + dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, exported.out) << dir;
  }
}

TEST(ShardedCheckpoint, ResumeAutoSkipsADamagedNewest) {
  Fixture f;
  const std::string whole = f.dir / "whole.safetensors", resumed = f.dir / "resumed.safetensors";
  const std::string root = f.dir / "root";
  const std::string constant = " --lr-schedule constant ";  // independent of --steps
  ASSERT_EQ(run_meshtrain(f.base() + constant + " --steps 5 --export " + whole).exit_code, 0);
  ASSERT_EQ(
      run_meshtrain(f.base() + constant + kSharded + " --steps 3 --save-every 1 --save " + root)
          .exit_code,
      0);
  const std::string newest = step_dir(root, 3) + "/rank_00000.bin";
  std::string bytes = slurp(newest);
  bytes[3] ^= 0x40;
  write_bytes(newest, bytes);
  RunResult r = run_meshtrain("train --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --data " +
                              f.data + constant + kSharded + " --steps 5 --save " + root +
                              " --resume auto --export " + resumed);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: skipping " + step_dir(root, 3)), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("resuming from " + step_dir(root, 2)), std::string::npos) << r.out;
  EXPECT_TRUE(slurp(resumed) == slurp(whole));
  // Nothing under --save yet: a fresh start.
  const std::string empty = f.dir / "empty";
  r = run_meshtrain(f.base() + kSharded + " --steps 1 --save " + empty + " --resume auto");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(step_dir(empty, 1) + "/manifest.json"));
}

TEST(ShardedCheckpoint, KeepCheckpointsPrunesOnlyCompleteOnesOfOurs) {
  Fixture f;
  const std::string root = f.dir / "root";
  fs::create_directories(root + "/step_000000");  // a user's directory with a checkpoint-like name
  write_bytes(root + "/step_000000/notes.txt", "mine\n");
  RunResult r = run_meshtrain(f.base() + kSharded +
                              " --steps 5 --save-every 1 --keep-checkpoints 2 --save " + root);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(root + "/step_000000/notes.txt"), "mine\n");
  for (int step = 2; step <= 3; ++step) EXPECT_FALSE(fs::exists(step_dir(root, step))) << step;
  for (int step = 4; step <= 5; ++step)
    EXPECT_EQ(verify(step_dir(root, step)).exit_code, 0) << step;
  expect_usage_error(run_meshtrain(f.base() + " --keep-checkpoints 2 --save " + (f.dir / "g")),
                     "--keep-checkpoints applies to --checkpoint-format sharded");
}

TEST(ShardedCheckpoint, BadFlagsAreOneLineExit2) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --checkpoint-format zip --save " + (f.dir / "x")),
                     "--checkpoint-format must be global or sharded");
  expect_usage_error(run_meshtrain(f.base() + " --resume auto"), "--resume auto looks for");
  expect_usage_error(run_meshtrain(f.base() + " --resume sometimes --save " + (f.dir / "x")),
                     "--resume must be auto");
  expect_usage_error(run_meshtrain(f.base() + " --max-restarts 2"), "--max-restarts resumes");
  expect_usage_error(run_meshtrain(f.base() + " --save-sync --save " + (f.dir / "x")),
                     "--save-sync applies");
  EXPECT_FALSE(fs::exists(f.dir / "x"));
}

// Disk full during a background save: exit 1 naming the file, the previous checkpoint intact.
TEST(ShardedCheckpoint, DiskFullDuringABackgroundSaveStopsTheRunAndKeepsThePrevious) {
  Fixture f;
  const std::string mnt = f.dir / "small";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=2m") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  struct Unmount {
    std::string p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  // 2 layers of dim 64: each checkpoint is ~1.9 MB, so the second one does not fit.
  const std::string model =
      "train --layers 2 --dim 64 --heads 4 --seq 8 --batch 2 --quiet --data " + f.data;
  const std::string root = mnt + "/root";
  RunResult r = run_meshtrain(model + " --dp 2 --zero 1" + kSharded +
                              " --steps 6 --save-every 2 --save " + root);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step_000004.tmp/rank_0000"), std::string::npos) << r.err;
  EXPECT_EQ(verify(step_dir(root, 2)).exit_code, 0);
  EXPECT_FALSE(fs::exists(step_dir(root, 4)));
}

// SIGKILL at random moments of a run saving every step: every complete checkpoint verifies.
TEST(ShardedCheckpoint, KilledDuringSavesLeavesOnlyCompleteCheckpoints) {
  Fixture f;
  std::mt19937 rng(std::random_device{}());
  for (int round = 0; round < 3; ++round) {
    const std::string root = f.dir / ("kill" + std::to_string(round));
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const std::string cmd = std::string(MESHTRAIN_BIN) + " " + f.base() +
                              " --layers 2 --dim 64 --heads 4 --dp 2 --zero 3" + kSharded +
                              " --steps 400 --save-every 1 --save " + root + " >/dev/null 2>&1";
      ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
      ::_exit(127);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(800 + rng() % 1500));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    // The newest complete checkpoints are the ones a kill could have hit mid-publish. Only
    // step folders count: the run's checkpoint_log.json (and its atomic temporary) sit beside
    // them, and with one step saved before the kill they would otherwise be "verified" too.
    std::vector<std::string> complete;
    if (fs::exists(root))
      for (const auto& e : fs::directory_iterator(root)) {
        const std::string name = e.path().filename().string();
        if (e.is_directory() && name.starts_with("step_") && !name.ends_with(".tmp"))
          complete.push_back(e.path().string());
      }
    std::sort(complete.rbegin(), complete.rend());
    for (size_t i = 0; i < complete.size() && i < 2; ++i) {
      const RunResult v = verify(complete[i]);
      EXPECT_EQ(v.exit_code, 0) << complete[i] << ": " << v.err;
    }
    RecordProperty("complete_round_" + std::to_string(round), int(complete.size()));
  }
}

// The (step, loss) of every step record of a metrics file, in file order.
std::vector<std::pair<int, double>> step_losses(const std::string& path) {
  std::vector<std::pair<int, double>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step") && j.contains("loss")) out.emplace_back(j["step"], j["loss"]);
  }
  return out;
}

// MESHTRAIN_FAULT at a random step after the first checkpoint, with --save-every 5
// --max-restarts 2: the job completes,
// its final weights equal an uninterrupted run's, bit for bit, and so does its metrics file's
// curve: every step once, in order, with the uninterrupted run's loss (the records of the
// steps taken again after the restart replace the failed attempt's; a restart used to start
// the file over, losing every step before the checkpoint).
TEST(ShardedCheckpoint, MaxRestartsEndsBitwiseEqualToAnUninterruptedRun) {
  Fixture f;
  std::mt19937 rng(std::random_device{}());
  // 6..12 of 12: after the checkpoint of step 5, so every draw restarts from a checkpoint.
  const int fault_step = 6 + int(rng() % 7);
  const std::string layout = " --dp 2 --zero 1 --steps 12 ";
  const std::string whole = f.dir / "whole.safetensors",
                    restarted = f.dir / "restarted.safetensors";
  const std::string whole_metrics = f.dir / "whole.jsonl";
  ASSERT_EQ(run_meshtrain(f.base() + layout + " --export " + whole + " --metrics " + whole_metrics)
                .exit_code,
            0);
  const auto curve = step_losses(whole_metrics);
  ASSERT_EQ(curve.size(), 12u);
  for (const std::string& format : {kSharded, std::string(" ")}) {
    const std::string root = f.dir / (format == kSharded ? "sharded" : "global");
    const std::string metrics = root + ".jsonl";
    const RunResult r = run_command("MESHTRAIN_FAULT=rank:1:step:" + std::to_string(fault_step) +
                                    " " + MESHTRAIN_BIN + " " + f.base() + layout + format +
                                    " --save-every 5 --max-restarts 2 --save " + root +
                                    " --export " + restarted + " --metrics " + metrics);
    ASSERT_EQ(r.exit_code, 0) << "fault at step " << fault_step << ": " << r.err;
    EXPECT_NE(r.err.find("injected fault at step " + std::to_string(fault_step)), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("restart 1 of 2"), std::string::npos) << r.err;
    EXPECT_TRUE(slurp(restarted) == slurp(whole)) << "fault at step " << fault_step << format;
    EXPECT_EQ(step_losses(metrics), curve) << "fault at step " << fault_step << format;
  }
}

}  // namespace
}  // namespace mt
