// The checkpoint directory rules (train/checkpoint/global_checkpoint.h and save_lock.h): a
// save replaces only a checkpoint, re-checked when it replaces it; one writer at a time;
// what a load verifies.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "model/gpt.h"
#include "test_util/temp_dir.h"
#include "train/checkpoint/global_checkpoint.h"
#include "train/checkpoint/save_lock.h"
#include "train/tiny_checkpoint.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;
using test_util::TinyModel;

TEST(CheckpointDir, ConflictNamesWhatIsInTheWay) {
  TempDir t;
  EXPECT_EQ(checkpoint_dir_conflict(t / "missing"), "");
  fs::create_directory(t / "empty");
  EXPECT_EQ(checkpoint_dir_conflict(t / "empty"), "");
  TinyModel tiny;
  tiny.save(t / "ck", 1);
  EXPECT_EQ(checkpoint_dir_conflict(t / "ck"), "");
  std::ofstream(t / "ck/NOTES.txt") << "mine";
  EXPECT_NE(checkpoint_dir_conflict(t / "ck").find("NOTES.txt"), std::string::npos);
  fs::create_directory(t / "partial");
  std::ofstream(t / "partial/model.safetensors") << "x";  // no state.json: not provably ours
  EXPECT_NE(checkpoint_dir_conflict(t / "partial"), "");
}

// The run checked the directory at its start; a file put there since is not deleted by
// the save that would replace it.
TEST(CheckpointDir, SaveRechecksWhenItReplaces) {
  TempDir t;
  TinyModel tiny;
  const std::string ck = t / "ck";
  tiny.save(ck, 1);
  std::ofstream(ck + "/NOTES.txt") << "mine";
  EXPECT_THROW(tiny.save(ck, 2), RuntimeError);
  EXPECT_TRUE(fs::exists(ck + "/NOTES.txt"));
  EXPECT_EQ(read_train_state(ck).step, 1);
  fs::remove(ck + "/NOTES.txt");
  tiny.save(ck, 2);
  EXPECT_EQ(read_train_state(ck).step, 2);
  EXPECT_TRUE(verify_checkpoint(ck).verified);
}

// Issue #26: the finiteness gate inside the writer refuses a checkpoint holding a NaN; the
// previous checkpoint stays, and no temporary is left beside it.
TEST(CheckpointDir, NonFiniteWeightsAreNeverSaved) {
  TempDir t;
  TinyModel tiny;
  const std::string ck = t / "ck";
  tiny.save(ck, 1);
  tiny.model->params().data()[0] = std::nanf("");
  try {
    tiny.save(ck, 2);
    FAIL() << "a NaN was saved";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the checkpoint of step 2 was not saved to " + ck), std::string::npos)
        << what;
    EXPECT_NE(what.find("element 0 is nan (not finite)"), std::string::npos) << what;
  }
  EXPECT_EQ(read_train_state(ck).step, 1);
  EXPECT_TRUE(verify_checkpoint(ck).verified);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(t.path)) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(CheckpointDir, OneLockHolderAtATime) {
  TempDir t;
  const std::string ck = t / "ck";
  {
    SaveDirLock first(ck);
    EXPECT_THROW(SaveDirLock second(ck), UsageError);
    EXPECT_TRUE(fs::exists(ck + ".lock"));
  }
  EXPECT_FALSE(fs::exists(ck + ".lock"));
  SaveDirLock again(ck);  // released with its holder
}

}  // namespace
}  // namespace mt
