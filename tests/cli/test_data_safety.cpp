// Data safety (issue #17): a run may refuse, but it never deletes or overwrites a user's
// files, never writes poisoned weights with exit 0, never trusts a damaged checkpoint and
// never hangs on an input. One test per defect found by trying to break it; each fails on
// the code before the fix.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_fixture.h"
#include "core/crc32c.h"
#include "core/temp_marker.h"
#include "train/checkpoint/metadata_checksum.h"
#include "train/safetensors.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_command;
using testing::run_meshtrain;
using testing::RunResult;
using testing::slurp;

// Every regular file under `dir` with its bytes: equal snapshots mean nothing was touched.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = slurp(e.path().string());
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Rewrites the manifest entry of `file` in checkpoint `dir` so that the checksum matches
// the file again: what a deliberate edit (not a flipped bit) of the file looks like.
void refresh_manifest(const std::string& dir, const std::string& file) {
  const std::string bytes = slurp(dir + "/" + file);
  nlohmann::json j = nlohmann::json::parse(slurp(dir + "/state.json"));
  j["files"][file]["bytes"] = bytes.size();
  j["files"][file]["crc32c"] = crc32c_hex(crc32c_update(0, bytes.data(), bytes.size()));
  seal_json(j);  // and the metadata's own checksum, as a deliberate edit would
  write_text(dir + "/state.json", j.dump(2));
}

// Overwrites the first float of `tensor` in a safetensors file with `value`.
void poke_tensor(const std::string& path, const std::string& tensor, float value) {
  uint64_t data_start = 0, begin = 0;
  {
    SafetensorsFile f(path);
    begin = f.tensor(tensor).begin;
    std::ifstream in(path, std::ios::binary);
    uint64_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 8);
    data_start = 8 + n;
  }
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(std::streamoff(data_start + begin));
  io.write(reinterpret_cast<const char*>(&value), sizeof value);
}

double seconds_of(const std::function<RunResult()>& run, RunResult* r) {
  const auto t0 = std::chrono::steady_clock::now();
  *r = run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Defect 1: --save DIR replaced whatever directory was there.
TEST(DataSafety, SaveNeverReplacesADirectoryThatIsNotACheckpoint) {
  Fixture f;
  const std::string proj = f.dir / "proj";
  fs::create_directory(proj);
  fs::copy_file(f.data, proj + "/train.bin");
  write_text(proj + "/NOTES.txt", "notes\n");
  const auto before = snapshot(proj);
  expect_usage_error(run_meshtrain("train" + f.tiny + "--data " + proj + "/train.bin --save " +
                                   proj + " --metrics " + proj + "/m.jsonl"),
                     "NOTES.txt");
  EXPECT_EQ(snapshot(proj), before);  // the data, the notes, and no metrics file
  // --save . from inside the project: the working directory is not emptied either.
  expect_usage_error(run_meshtrain("train" + f.tiny + "--data train.bin --save .", proj),
                     "not a meshtrain checkpoint");
  EXPECT_EQ(snapshot(proj), before);
  // An output inside the directory a save replaces would vanish with it.
  const std::string empty = f.dir / "empty";
  fs::create_directory(empty);
  expect_usage_error(run_meshtrain(f.base() + " --save " + empty + " --metrics " + empty + "/m"),
                     "inside --save");
  // What may be replaced: an empty directory, and a checkpoint (again and again).
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + empty).exit_code, 0);
  auto r = run_meshtrain(f.base() + " --steps 3 --save " + empty);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Defect 2: an output naming an input destroyed it (SIGBUS on the mapped shard, JSONL
// where the weights were).
TEST(DataSafety, NoOutputIsAnInputOrAnotherOutput) {
  Fixture f;
  const std::string w = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 1 --export " + w).exit_code, 0);
  const std::string cfg = f.dir / "run.toml";
  write_text(cfg, "[train]\nsteps = 1\n");
  fs::create_symlink(f.data, f.dir / "link.bin");
  const auto before = snapshot(f.dir.path);
  expect_usage_error(run_meshtrain(f.base() + " --metrics " + f.data), "same file as --data");
  expect_usage_error(run_meshtrain(f.base() + " --trace " + (f.dir / "link.bin")),
                     "same file as --data");
  expect_usage_error(run_meshtrain(f.base() + " --init-from " + w + " --metrics " + w),
                     "same file as --init-from");
  expect_usage_error(run_meshtrain(f.base() + " --init-from " + w + " --export " + w),
                     "same file as --init-from");
  expect_usage_error(run_meshtrain(f.base() + " --config " + cfg + " --trace " + cfg),
                     "same file as --config");
  expect_usage_error(
      run_meshtrain(f.base() + " --metrics " + (f.dir / "o") + " --trace " + (f.dir / "o")),
      "both name");
  EXPECT_EQ(snapshot(f.dir.path), before);
  // A checkpoint's files are inputs too when it is loaded.
  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  const std::string model = slurp(ck + "/model.safetensors");
  expect_usage_error(run_meshtrain(f.base() + " --steps 3 --load " + ck + " --export " + ck +
                                   "/model.safetensors"),
                     "same file as --load");
  EXPECT_EQ(slurp(ck + "/model.safetensors"), model);
}

// Defect 3: inf/nan flags passed validation and a non-finite update was saved, exit 0.
TEST(DataSafety, NonFiniteFlagsAndUpdatesAreNeverWritten) {
  Fixture f;
  const std::string out = f.dir / "w.safetensors";
  for (const char* flag : {"--lr inf", "--weight-decay inf", "--grad-clip nan", "--beta1 nan",
                           "--eps inf", "--min-lr -inf", "--timeout inf", "--bucket-mb nan"})
    expect_usage_error(run_meshtrain(f.base() + " " + flag + " --export " + out),
                       "must be a finite number");
  write_text(f.dir / "inf.toml", "[train]\nlr = inf\n");
  expect_usage_error(run_meshtrain(f.base() + " --config " + (f.dir / "inf.toml")),
                     "--lr must be a finite number");
  expect_usage_error(run_meshtrain("sample --init-from " + out + " --temperature nan"),
                     "--temperature");
  EXPECT_FALSE(fs::exists(out));
  // A finite but absurd lr: the first update overflows. Nothing is exported, and the
  // checkpoint of an earlier good run stays the newest, untouched.
  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  const auto good = snapshot(ck);
  auto r = run_meshtrain(f.base() + " --steps 4 --lr 1e38 --save-every 1 --save " + ck +
                         " --export " + out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("step 1: non-finite weights after the update; not saving"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(snapshot(ck), good);
  EXPECT_FALSE(fs::exists(out));
}

// Defects 3 and 14: a NaN in a checkpoint's optimizer state or in --init-from weights is
// named at load (file and tensor, exit 2), not trained on and saved again.
TEST(DataSafety, NonFiniteValuesInLoadedFilesAreNamed) {
  Fixture f;
  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  poke_tensor(ck + "/optimizer.safetensors", "transformer.h.0.attn.c_attn.weight.exp_avg",
              std::nanf(""));
  refresh_manifest(ck, "optimizer.safetensors");  // an edit, not a flipped bit
  const std::string next = f.dir / "next";
  expect_usage_error(run_meshtrain(f.base() + " --steps 4 --load " + ck + " --save " + next),
                     "transformer.h.0.attn.c_attn.weight.exp_avg holds NaN or Inf");
  EXPECT_FALSE(fs::exists(next));

  const std::string w = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 1 --export " + w).exit_code, 0);
  poke_tensor(w, "transformer.ln_f.weight", INFINITY);
  expect_usage_error(run_meshtrain(f.base() + " --init-from " + w), "transformer.ln_f.weight");
  expect_usage_error(run_meshtrain("sample --tokens 4 --init-from " + w), "w.safetensors");
}

// Defect 4: a flipped bit was trained on; an overflowing step was wrapped.
TEST(DataSafety, CheckpointsAreVerifiedOnLoad) {
  Fixture f;
  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  const std::string state = slurp(ck + "/state.json");
  const std::string model = slurp(ck + "/model.safetensors");
  {
    std::string flipped = model;
    flipped[flipped.size() - 7] ^= 0x10;  // one bit of the last tensor's data
    std::ofstream(ck + "/model.safetensors", std::ios::binary) << flipped;
  }
  expect_usage_error(run_meshtrain(f.base() + " --steps 4 --load " + ck),
                     "model.safetensors fails its checksum");
  std::ofstream(ck + "/model.safetensors", std::ios::binary) << model;
  fs::resize_file(ck + "/optimizer.safetensors", fs::file_size(ck + "/optimizer.safetensors") - 4);
  expect_usage_error(run_meshtrain(f.base() + " --steps 4 --load " + ck), "optimizer.safetensors");
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  const std::string fresh = slurp(ck + "/state.json");
  for (const auto& [bad, needle] :
       std::vector<std::pair<std::string, std::string>>{{"4294967301", "outside 0..2147483647"},
                                                        {"-3", "outside"},
                                                        {"2.5", "not an integer"},
                                                        {"\"2\"", "not an integer"}}) {
    nlohmann::json j = nlohmann::json::parse(fresh);
    j["step"] = nlohmann::json::parse(bad);
    seal_json(j);  // resealed: the range checks behind the checksum hold on their own
    write_text(ck + "/state.json", j.dump());
    expect_usage_error(run_meshtrain(f.base() + " --steps 4 --load " + ck), needle);
  }
  nlohmann::json j = nlohmann::json::parse(fresh);
  j["data_position"] = nlohmann::json::parse("18446744073709551615");
  seal_json(j);
  write_text(ck + "/state.json", j.dump());
  expect_usage_error(run_meshtrain(f.base() + " --steps 4 --load " + ck), "data_position");
  // Intact, it resumes.
  write_text(ck + "/state.json", fresh);
  auto r = run_meshtrain(f.base() + " --steps 4 --load " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Defect 5: bad output paths were found after the last step, losing the run.
TEST(DataSafety, OutputPathsAreCheckedBeforeStepOne) {
  Fixture f;
  // A million steps would take minutes: each error must come before the first.
  const std::string longrun = "train" + f.tiny + "--steps 1000000 --data " + f.data;
  // Missing folders are created (issue #31); a path through a regular file cannot be.
  const std::string blocked = f.data + "/no/such/dir";
  const std::string not_dir = f.data + " is a regular file, not a directory";
  for (const auto& [flag, needle] : std::vector<std::pair<std::string, std::string>>{
           {" --export " + blocked + "/w.safetensors", not_dir},
           {" --save " + blocked + "/ck", not_dir},
           {" --trace " + blocked + "/t.json", not_dir},
           {" --metrics " + blocked + "/m.jsonl", not_dir},
           {" --save " + f.data, "give a directory"},
           {" --export " + f.dir.path.string(), "is a directory"}}) {
    RunResult r;
    // `timeout` bounds a run that would train instead of refusing (exit 124 fails).
    const double s = seconds_of(
        [&] {
          return run_command("timeout 20 " + std::string(MESHTRAIN_BIN) + " " + longrun + flag);
        },
        &r);
    expect_usage_error(r, needle);
    EXPECT_LT(s, 10.0) << flag;
  }
  // --save through a symlink to a checkpoint: saved into the directory it names.
  const std::string real = f.dir / "real";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + real).exit_code, 0);
  fs::create_directory_symlink(real, f.dir / "link");
  auto r = run_meshtrain(f.base() + " --steps 3 --load " + (f.dir / "link") + " --save " +
                         (f.dir / "link"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(f.dir / "link"));
  EXPECT_EQ(nlohmann::json::parse(slurp(real + "/state.json"))["step"], 3);
}

// Defect 6: two runs wrote the same --save directory at once, both exit 0.
TEST(DataSafety, ASaveDirectoryHasOneWriter) {
  Fixture f;
  const std::string ck = f.dir / "ck", pid_file = f.dir / "pid";
  // The first run trains long enough to be caught holding the lock, then is stopped.
  const std::string first = "sh -c 'echo $$ > " + pid_file + "; exec " + MESHTRAIN_BIN + " train" +
                            f.tiny + "--steps 10000000 --data " + f.data + " --save " + ck +
                            "' >/dev/null 2>&1 &";
  ASSERT_EQ(std::system(first.c_str()), 0);
  for (int i = 0; i < 200 && !fs::exists(ck + ".lock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(ck + ".lock"));
  const pid_t pid = std::stoi(slurp(pid_file));
  auto r = run_meshtrain(f.base() + " --save " + ck);
  ::kill(pid, SIGKILL);
  expect_usage_error(r, "is being written by another run (meshtrain pid " + std::to_string(pid));
  EXPECT_FALSE(fs::exists(ck));  // the second run wrote nothing
  // The killed holder's lock died with it.
  for (int i = 0; i < 100 && ::kill(pid, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  r = run_meshtrain(f.base() + " --save " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(ck + ".lock"));  // removed by a holder that ends normally
}

// Defect 8: a save killed mid-write left DIR.tmp-* (a whole checkpoint's size) for good.
// Issue #26: clean-up deleted any sibling merely named so (a user's "ck.old-backup", a full
// checkpoint copy; "ck.tmp-before/notes.txt"; "sk.old-photos/"). Only a temporary carrying
// meshtrain's marker under its own name is deleted.
TEST(DataSafety, StaleSaveTemporariesAreRemoved) {
  Fixture f;
  const std::string ck = f.dir / "ck", sk = f.dir / "sk";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  for (const char* t : {"ck.tmp-a1B2c3", "ck.old-Zz9y8X"}) {  // what a killed save leaves
    fs::create_directory(f.dir / t);
    write_text(f.dir / t + std::string("/model.safetensors"), std::string(1 << 16, 'x'));
    mark_temporary(f.dir / t);
  }
  fs::create_directory(f.dir / "other.tmp-a1B2c3");  // another directory's: not ours
  mark_temporary(f.dir / "other.tmp-a1B2c3");
  fs::create_directory(f.dir / "ck.tmp-keep");  // not a name a save makes
  // The user's, named like ours: a checkpoint copy (even of a marked temporary), notes.
  fs::copy(ck, f.dir / "ck.old-backup", fs::copy_options::recursive);
  fs::copy(f.dir / "ck.tmp-a1B2c3", f.dir / "ck.old-backu2", fs::copy_options::recursive);
  fs::create_directory(f.dir / "ck.tmp-before");
  write_text(f.dir / "ck.tmp-before/notes.txt", "mine\n");
  fs::create_directory(f.dir / "sk.old-photos");
  write_text(f.dir / "sk.old-photos/a.jpg", "jpeg");
  const auto before = snapshot(f.dir.path);
  auto r = run_meshtrain(f.base() + " --save " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_meshtrain(f.base() + " --save " + sk);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(f.dir / "ck.tmp-a1B2c3"));
  EXPECT_FALSE(fs::exists(f.dir / "ck.old-Zz9y8X"));
  EXPECT_TRUE(fs::exists(f.dir / "other.tmp-a1B2c3"));
  EXPECT_TRUE(fs::exists(f.dir / "ck.tmp-keep"));
  const auto after = snapshot(f.dir.path);
  for (const char* kept :
       {"ck.old-backup/model.safetensors", "ck.old-backup/state.json",
        "ck.old-backu2/model.safetensors", "ck.tmp-before/notes.txt", "sk.old-photos/a.jpg"}) {
    ASSERT_TRUE(after.count(kept)) << kept << " was deleted";
    EXPECT_EQ(after.at(kept), before.at(kept)) << kept;
  }
  // Published checkpoints carry no marker, and one left in one (a crash between the
  // publishing rename and the marker's removal) is ignored by the checks and the load.
  EXPECT_FALSE(fs::exists(ck + "/.meshtrain-temporary"));
  mark_temporary(ck, "ck.tmp-Qq1Ww2");
  EXPECT_EQ(run_meshtrain("checkpoint verify " + ck).exit_code, 0);
  r = run_meshtrain(f.base() + " --steps 3 --load " + ck + " --save " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Defect 9: an input that is a FIFO blocked forever, out of --timeout's reach.
TEST(DataSafety, FifoInputsAreRefusedNotWaitedOn) {
  Fixture f;
  const std::string fifo = f.dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string w = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 1 --export " + w).exit_code, 0);
  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  fs::remove(ck + "/state.json");
  ASSERT_EQ(::mkfifo((ck + "/state.json").c_str(), 0600), 0);
  // `timeout` turns a hang into exit 124, which fails the exit-code check.
  const std::string t = "train" + f.tiny;
  for (const std::string& args :
       {t + "--data " + fifo, f.base() + " --val-data " + fifo + " --eval-every 1",
        f.base() + " --init-from " + fifo, f.base() + " --load " + ck,
        f.base() + " --config " + fifo, std::string("sample --init-from ") + fifo,
        std::string("sample --load ") + ck}) {
    auto r = run_command("timeout 20 " + std::string(MESHTRAIN_BIN) + " " + args);
    expect_usage_error(r, "FIFO");
  }
}

// Defect 11: sample and bench took any thread count (100000 segfaulted).
TEST(DataSafety, OneThreadRangeForEveryCommand) {
  Fixture f;
  const std::string w = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 1 --export " + w).exit_code, 0);
  for (const char* n : {"100000", "0", "-1"}) {
    expect_usage_error(run_meshtrain("sample --tokens 2 --init-from " + w + " --threads " + n),
                       "--threads must be in 1..256");
    expect_usage_error(run_meshtrain(std::string("bench gemm --threads ") + n),
                       "--threads must be in 1..256");
    expect_usage_error(run_meshtrain(f.base() + " --threads " + n), "--threads must be in 1..256");
  }
  expect_usage_error(run_meshtrain("bench comm --ranks 100000"), "--ranks must be in 1..1024");
  // -1 read as 2^64 - 1: the sizes doubled until the OOM killer (found by a flag sweep).
  expect_usage_error(run_meshtrain("bench comm --max-bytes -1"), "give a smaller --max-bytes");
  expect_usage_error(run_meshtrain("bench comm --max-bytes 100000000000000"),
                     "more than this machine has available");
  expect_usage_error(run_meshtrain(f.base() + " --dp 2048 --batch 2048"), "--backend mpi");
}

// Defect 12: running out of memory was "rank 0: std::bad_alloc", or the OOM killer's
// silence. The per-rank estimate (train/memory_estimate.h) refuses first, with figures.
TEST(DataSafety, ARunThatCannotFitIsRefusedWithFigures) {
  Fixture f;
  const std::string run = f.base() + " --layers 4 --dim 64 --heads 4 --seq 32 --batch 8 --dp 4";
  RunResult fits, refused;
  const double fits_s = seconds_of([&] { return run_meshtrain(run); }, &fits);
  EXPECT_EQ(fits.exit_code, 0) << fits.err;  // the machine's own figure: it fits
  const double refused_s = seconds_of(
      [&] {
        return run_command("MESHTRAIN_MEMORY_LIMIT_BYTES=1000000 " + std::string(MESHTRAIN_BIN) +
                           " " + run);
      },
      &refused);
  expect_usage_error(refused, "the run needs about ");
  EXPECT_NE(refused.err.find("4 ranks x "), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("; try "), std::string::npos) << refused.err;
  std::printf("refused in %.3f s (the run took %.3f s)\n", refused_s, fits_s);
  EXPECT_LT(refused_s, 2.0);
}

// Defect 16: inputs that were ignored without a word.
TEST(DataSafety, IgnoredInputsAreErrors) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --config " + f.dir.path.string()),
                     "is a directory");
  expect_usage_error(run_meshtrain(f.base() + " --config ''"), "--config needs a file name");
  write_text(f.dir / "a.toml", "[train]\nsteps = 1\n");
  write_text(f.dir / "b.toml", "[train]\nsteps = 2\n");
  expect_usage_error(run_meshtrain(f.base() + " --config " + (f.dir / "a.toml") + " --config " +
                                   (f.dir / "b.toml")),
                     "--config is given 2 times");
  const std::string ck = f.dir / "ck", w = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck + " --export " + w).exit_code, 0);
  expect_usage_error(run_meshtrain(f.base() + " --steps 3 --load " + ck + " --init-from " + w),
                     "not both");
}

// Defect 17: a fault that cannot fire let a chaos test pass without injecting anything.
TEST(DataSafety, FaultsThatCannotFireAreRefused) {
  Fixture f;
  auto with_fault = [&](const std::string& spec, const std::string& args) {
    return run_command("MESHTRAIN_FAULT=" + spec + " " + std::string(MESHTRAIN_BIN) + " " + args);
  };
  expect_usage_error(with_fault("rank:0:step:0", f.base()), "names step 0");
  expect_usage_error(with_fault("rank:0:step:3", f.base()), "names step 3");
  expect_usage_error(with_fault("rank:2:step:1", f.base() + " --dp 2"), "names rank 2");
  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  expect_usage_error(with_fault("rank:0:step:2", f.base() + " --steps 4 --load " + ck),
                     "names step 2 but the run takes steps 3..4");
  // One that can fire still does.
  auto r = with_fault("rank:1:step:2", f.base() + " --dp 2");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1: injected fault at step 2"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mt
