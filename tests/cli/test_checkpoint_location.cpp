// Checkpoint commands agree (issue #31, item 7): `checkpoint verify`, `export --from`,
// `sample --load` and `train --load` each take a run folder (its newest complete step) or
// one step folder (or a global checkpoint), and their errors name the command's argument.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli_fixture.h"
#include "run_binary.h"
#include "train/sealed_rewrite.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_meshtrain;

// The fixture's command line without --quiet, which hides the line naming the step taken.
std::string loud(std::string args) {
  args.replace(args.find("--quiet"), 7, "");
  return args;
}

struct SavedRun : Fixture {
  std::string root = dir / "run";
  std::string newest = root + "/step_000002", older = root + "/step_000001";
  SavedRun() {
    const auto r =
        run_meshtrain(base() + " --checkpoint-format sharded --save-every 1 --save " + root);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
};

TEST(CheckpointLocation, EveryCommandTakesARunFolderAsItsNewestStep) {
  SavedRun f;
  auto r = run_meshtrain("checkpoint verify " + f.root);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(f.newest + ": ok: sharded checkpoint of step 2"), std::string::npos)
      << r.out;
  r = run_meshtrain("export --from " + f.root + " --to " + (f.dir / "w.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tensors of step 2"), std::string::npos) << r.out;
  r = run_meshtrain("sample --tokens 4 --load " + f.root);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_meshtrain(loud(f.base()) + " --steps 3 --load " + f.root + " --progress none");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--load " + f.root + ": its newest checkpoint is " + f.newest),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("meshtrain: done: steps 3-3"), std::string::npos) << r.out;
}

TEST(CheckpointLocation, AStepFolderOrAGlobalCheckpointIsTakenAsGiven) {
  SavedRun f;
  auto r = run_meshtrain("sample --tokens 4 --load " + f.older);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_meshtrain("export --from " + f.older + " --to " + (f.dir / "w1.safetensors"));
  EXPECT_NE(r.out.find("tensors of step 1"), std::string::npos) << r.out << r.err;
  // A global checkpoint: export --to used to demand a sharded one ("no manifest.json").
  const std::string global = f.dir / "global";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + global).exit_code, 0);
  r = run_meshtrain("export --from " + global + " --to " + (f.dir / "w2.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("tensors of step 2"), std::string::npos) << r.out;
}

TEST(CheckpointLocation, ErrorsNameTheCommandThatWasRun) {
  Fixture f;
  const std::string empty = f.dir / "empty";
  fs::create_directory(empty);
  expect_usage_error(run_meshtrain("checkpoint verify " + empty),
                     "checkpoint verify " + empty + " is not a checkpoint");
  expect_usage_error(run_meshtrain("export --from " + empty + " --to " + (f.dir / "w")),
                     "--from " + empty + " is not a checkpoint");
  expect_usage_error(run_meshtrain("sample --load " + empty),
                     "--load " + empty + " is not a checkpoint");
  expect_usage_error(run_meshtrain(f.base() + " --load " + empty),
                     "--load " + empty + " is not a checkpoint");
  // A damaged global checkpoint, verified: the message names `checkpoint verify`, not --load.
  const std::string global = f.dir / "global";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + global).exit_code, 0);
  std::ofstream(global + "/state.json") << "{";
  const auto r = run_meshtrain("checkpoint verify " + global);
  expect_usage_error(r, "checkpoint verify " + global + ": ");
  EXPECT_EQ(r.err.find("--load"), std::string::npos) << r.err;
}

// A llama checkpoint written before checkpoints recorded tie_embeddings, without
// lm_head.weight: an untied model that lost its head cannot be told from a tied one. Verify
// passes (exit 0: everything it can check did) and says what it could not check on its one
// line; it printed a second line once, which a script reading "ok" would not see.
TEST(CheckpointLocation, VerifyOfAPreRecordLlamaCheckpointNamesWhatItCannotCheckOnOneLine) {
  Fixture f;
  const std::string ck = f.dir / "llama";
  ASSERT_EQ(run_meshtrain(f.base() + " --arch llama --tie-embeddings=false --save " + ck).exit_code,
            0);
  test_util::rewrite_sealed(ck, "model.safetensors", [](auto& data, auto&, auto& meta) {
    data.erase("lm_head.weight");
    meta.erase("tie_embeddings");
  });
  const auto r = run_meshtrain("checkpoint verify " + ck);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  EXPECT_EQ(r.out.rfind(ck + ": ok: global checkpoint of step ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(" bytes verified; not checked: lm_head.weight (written before "),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace mt
