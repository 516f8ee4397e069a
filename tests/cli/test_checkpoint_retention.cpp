// Issue #26, checkpoints: one retention policy (--keep-checkpoints keeps the K newest valid
// checkpoints of this run, in the order written; docs/checkpoints.md), clean-up that deletes
// only what carries meshtrain's marker, step folders in the way found before training, and
// the messages a user needs. Each test fails on the code before the fix.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "train/checkpoint/checkpoint_dir.h"

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

bool verifies(const std::string& dir) {
  return run_meshtrain("checkpoint verify " + dir).exit_code == 0;
}

void flip_a_byte(const std::string& path) {
  std::string bytes = slurp(path);
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The step folders under root, sorted.
std::vector<std::string> step_folders(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().starts_with("step_"))
      out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> names(std::initializer_list<int> steps) {
  std::vector<std::string> out;
  for (int s : steps) out.push_back(step_dir_name(s));
  return out;
}

// Case A1 of the issue: after resuming from an older step (--load), every checkpoint the run
// wrote was deleted right after it was written, together with the one it resumed from,
// because step_000010 of the earlier run had a higher number.
TEST(CheckpointRetention, ResumingFromAnOlderStepKeepsWhatThisRunWrites) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 10 --save-every 2 --save " + root).exit_code,
      0);
  for (int s : {4, 6, 8}) fs::remove_all(step_dir(root, s));  // leave step 2 and step 10
  const RunResult r =
      run_meshtrain(f.base() + kSharded + " --steps 5 --save-every 1 --keep-checkpoints 1 --load " +
                    step_dir(root, 2) + " --save " + root);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Its newest (K = 1); the checkpoint it resumed from and the other run's stay.
  EXPECT_EQ(step_folders(root), names({2, 5, 10}));
  for (int s : {2, 5, 10}) EXPECT_TRUE(verifies(step_dir(root, s))) << s;
}

// Case A1 again: a step folder the run would write holds another run's checkpoint (or a
// user's folder): refused before training, nothing touched. It used to be replaced, or, for
// a user's folder, found at that save, after the run's other checkpoints were deleted.
TEST(CheckpointRetention, StepFoldersInTheWayAreFoundBeforeTraining) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 4 --save-every 1 --save " + root).exit_code, 0);
  const std::string before = slurp(step_dir(root, 3) + "/manifest.json");
  expect_usage_error(run_meshtrain(f.base() + kSharded + " --steps 4 --save-every 1 --load " +
                                   step_dir(root, 2) + " --save " + root),
                     "holds step_000003, where this run would save step 3");
  EXPECT_EQ(slurp(step_dir(root, 3) + "/manifest.json"), before);
  // The same command again is another run: it does not replace the first run's checkpoints.
  expect_usage_error(
      run_meshtrain(f.base() + kSharded + " --steps 4 --save-every 1 --save " + root),
      "a checkpoint this run did not write");
  // A user's folder named like a future step: exit 2 before step 1, not at the save of step 10.
  const std::string other = f.dir / "other";
  fs::create_directories(other + "/step_000010");
  std::ofstream(other + "/step_000010/notes.txt") << "mine\n";
  expect_usage_error(
      run_meshtrain(f.base() + kSharded +
                    " --steps 10 --save-every 5 --keep-checkpoints 1 --save " + other),
      "not a meshtrain checkpoint");
  EXPECT_EQ(step_folders(other), names({10}));
  EXPECT_EQ(slurp(other + "/step_000010/notes.txt"), "mine\n");
}

// Case A1, damaged newest: --resume auto skips it (and says so under --quiet: warnings of
// damaged data always print); retention used to delete every valid checkpoint and keep the
// damaged one, exit 0.
TEST(CheckpointRetention, ADamagedCheckpointIsNotCountedAndValidOnesSurvive) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 10 --save-every 5 --save " + root).exit_code,
      0);
  flip_a_byte(step_dir(root, 10) + "/rank_00000.bin");
  const RunResult r = run_meshtrain(f.base() + kSharded +
                                    " --steps 8 --save-every 1 --keep-checkpoints 1 --resume auto "
                                    "--save " +
                                    root);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: skipping " + step_dir(root, 10)), std::string::npos) << r.err;
  // Kept: the run's newest, the checkpoint it resumed from, the damaged one (never counted,
  // never deleted, reported).
  EXPECT_EQ(step_folders(root), names({5, 8, 10}));
  EXPECT_TRUE(verifies(step_dir(root, 5)));
  EXPECT_TRUE(verifies(step_dir(root, 8)));
  EXPECT_NE(r.err.find(step_dir(root, 10) + " is damaged"), std::string::npos) << r.err;
}

// A resumed run continues its run: its earlier checkpoints count, a damaged one at a step it
// saves again is replaced, and retention still never deletes the one it resumed from.
TEST(CheckpointRetention, AResumedRunKnowsWhatItWroteBeforeTheRestart) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 3 --save-every 1 --save " + root).exit_code, 0);
  flip_a_byte(step_dir(root, 3) + "/rank_00000.bin");
  const RunResult r =
      run_meshtrain(f.base() + kSharded +
                    " --steps 6 --save-every 1 --keep-checkpoints 2 --resume auto --save " + root);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // step 1 (the run's, older) deleted; 2 resumed from; 3 replaced, then deleted; 5 and 6 kept.
  EXPECT_EQ(step_folders(root), names({2, 5, 6}));
  for (int s : {2, 5, 6}) EXPECT_TRUE(verifies(step_dir(root, s))) << s;
}

// The newest checkpoint of the run has a truncated manifest: --resume auto skips it, and the
// run saves that step again in its place (the log says the folder is the run's), rather than
// refusing it as a stranger's folder.
TEST(CheckpointRetention, ARunReplacesItsOwnCheckpointWithABrokenManifest) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 3 --save-every 1 --save " + root).exit_code, 0);
  std::ofstream(step_dir(root, 3) + "/manifest.json", std::ios::trunc) << "{";
  const RunResult r =
      run_meshtrain(f.base() + kSharded + " --steps 4 --save-every 1 --resume auto --save " + root);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("replacing " + step_dir(root, 3)), std::string::npos) << r.err;
  for (int s : {1, 2, 3, 4}) EXPECT_TRUE(verifies(step_dir(root, s))) << s;
  // Another run's folder with a broken manifest is not replaced: refused before training.
  const std::string other = f.dir / "other";
  fs::create_directories(other);
  fs::copy(step_dir(root, 4), other + "/step_000002", fs::copy_options::recursive);
  std::ofstream(other + "/step_000002/manifest.json", std::ios::trunc) << "{";
  expect_usage_error(run_meshtrain(f.base() + kSharded + " --steps 2 --save " + other),
                     "holds step_000002");
}

// Case A3: retention deleted a user's step_000001.tmp/ (it renamed the checkpoint onto it);
// start-up clean-up deleted any step_NNNNNN.tmp holding checkpoint-like files.
TEST(CheckpointRetention, AUsersTmpFolderIsNeverDeleted) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 3 --save-every 1 --save " + root).exit_code, 0);
  fs::create_directories(root + "/step_000001.tmp");
  std::ofstream(root + "/step_000001.tmp/rank_00000.bin") << "my bytes";
  const RunResult r =
      run_meshtrain(f.base() + kSharded +
                    " --steps 5 --save-every 1 --keep-checkpoints 1 --resume auto --save " + root);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(root + "/step_000001.tmp/rank_00000.bin"), "my bytes");
  // step 1 could not be deleted through its temporary name: kept, and said so.
  EXPECT_TRUE(verifies(step_dir(root, 1)));
  EXPECT_NE(r.err.find("not deleting " + step_dir(root, 1)), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(step_dir(root, 2)));
  EXPECT_TRUE(verifies(step_dir(root, 5)));
  // A temporary of ours (marked) left by a crash is still removed.
  fs::create_directories(root + "/step_000009.tmp");
  std::ofstream(root + "/step_000009.tmp/.meshtrain-temporary")
      << "meshtrain temporary directory step_000009.tmp\n";
  const RunResult again =
      run_meshtrain(f.base() + kSharded + " --steps 6 --save-every 1 --resume auto --save " + root);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_FALSE(fs::exists(root + "/step_000009.tmp"));
  EXPECT_TRUE(fs::exists(root + "/step_000001.tmp/rank_00000.bin"));
}

// Case E: --load of a sharded run root said "state.json is missing"; now it means the
// newest complete step there, as for every command (issue #31, item 7).
TEST(CheckpointRetention, LoadingARunRootResumesItsNewestStep) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 2 --save-every 1 --save " + root).exit_code, 0);
  std::string args = f.base() + " --steps 4 --progress none --load " + root;
  args.replace(args.find("--quiet"), 7, "");  // the line naming the step is not quiet
  const RunResult r = run_meshtrain(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("its newest checkpoint is " + step_dir(root, 2)), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("done: steps 3-4"), std::string::npos) << r.out;
  const RunResult v = run_meshtrain("checkpoint verify " + root);
  EXPECT_EQ(v.exit_code, 0) << v.err;
}

}  // namespace
}  // namespace mt
