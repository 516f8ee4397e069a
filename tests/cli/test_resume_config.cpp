// Resumes that remember their run (issue #31, item 2): a checkpoint records the run's
// resolved configuration (model, layout, training, data) under its checksum; --load and
// --resume auto take it; a flag that contradicts the model's shape is refused naming both
// values; a training setting changed on purpose is announced, one line per change.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_fixture.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/metadata_checksum.h"
#include "train/lr_schedule.h"

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_meshtrain;

// A run whose shape and training settings are none of the defaults, saved after 2 steps.
struct SavedRun : Fixture {
  std::string ck = dir / "ck";
  std::string shape = " --layers 2 --dim 32 --heads 4 --seq 8 ";
  explicit SavedRun(const std::string& format = "global", const std::string& layout = "") {
    const auto r =
        run_meshtrain("train" + shape + "--batch 4 --steps 2 --lr 3e-3 --quiet --data " + data +
                      " --checkpoint-format " + format + " --save " + ck + " " + layout);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
};

std::string lr_text(double lr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", lr);
  return buf;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream(path) << j.dump(2) << "\n";
}

TEST(ResumeConfig, ResumeAutoNeedsNoFlagsButTheSaveDirectory) {
  SavedRun f;
  // No shape, no data, no lr: all from the checkpoint. Only the steps change.
  auto r = run_meshtrain("train --resume auto --save " + f.ck + " --steps 4 --progress none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double lr = LrSchedule{LrKind::cosine, 3e-3, 1e-4, 0, 4}.at(2);
  EXPECT_NE(r.out.find("meshtrain: resumed from step 2 of " + f.ck +
                       "; changed: --steps 2 -> 4 (the cosine schedule now ends at step 4; lr at "
                       "step 3 is " +
                       lr_text(lr) + ")"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("meshtrain: done: steps 3-4"), std::string::npos) << r.out;
  // --load alone, from a run folder: the recorded run, nothing changed.
  r = run_meshtrain("train --load " + f.ck + " --progress none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from step 4 of " + f.ck +
                       " with the model, layout, training and data it recorded"),
            std::string::npos)
      << r.out;
}

TEST(ResumeConfig, AFlagContradictingTheShapeIsRefusedNamingBothValues) {
  SavedRun f;
  expect_usage_error(
      run_meshtrain("train --load " + f.ck + " --steps 3 --layers 3"),
      "--layers 3 contradicts the checkpoint " + f.ck + ", whose model has --layers 2");
  expect_usage_error(run_meshtrain("train --load " + f.ck + " --steps 3 --dim 64"),
                     "--dim 64 contradicts");
  // Learned positions: the position table has --seq rows.
  expect_usage_error(run_meshtrain("train --load " + f.ck + " --steps 3 --seq 16"),
                     "--seq 16 contradicts the checkpoint " + f.ck + ", whose model has --seq 8");
  // Repeating the shape is no change.
  const auto r = run_meshtrain("train --load " + f.ck + f.shape +
                               "--steps 3 --progress none --data " + f.data);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // Only the steps changed: the shape flags repeat the record.
  EXPECT_EQ(r.out.find("changed: --layers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("changed: --steps 2 -> 3"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("changed:"), r.out.rfind("changed:")) << r.out;
}

// The checkpoint's data position counts draws of its run's sample order: a resume in another
// order, or with another seed of the shuffled order, is refused before any rank starts.
TEST(ResumeConfig, AnotherSampleOrderIsRefusedNamingBothValues) {
  SavedRun f;  // shuffled, the default, with --seed's default
  expect_usage_error(run_meshtrain("train --load " + f.ck + " --steps 3 --data-order sequential"),
                     "--data-order sequential contradicts the checkpoint " + f.ck +
                         ", whose run has --data-order shuffled");
  expect_usage_error(run_meshtrain("train --load " + f.ck + " --steps 3 --seed 77"),
                     "--seed 77 contradicts the checkpoint " + f.ck);
  // Repeating the recorded order is no change.
  const auto r =
      run_meshtrain("train --load " + f.ck + " --steps 3 --data-order shuffled --progress none");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(ResumeConfig, TrainingAndLayoutChangesAreAnnouncedOneLineEach) {
  SavedRun f;
  const auto r = run_meshtrain("train --load " + f.ck +
                               " --steps 4 --lr 1e-3 --batch 2 --dp 2 --progress none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string head = "meshtrain: resumed from step 2 of " + f.ck + "; changed: ";
  const double lr = LrSchedule{LrKind::cosine, 1e-3, 1e-4, 0, 4}.at(2);
  for (const std::string& change :
       {std::string("--lr 0.003 -> 0.001 (lr at step 3 is " + lr_text(lr) + ")"),
        std::string("--batch 4 -> 2\n"), std::string("--dp 1 -> 2\n"),
        std::string("--steps 2 -> 4 (the cosine schedule now ends at step 4; lr at step 3 is " +
                    lr_text(lr) + ")")})
    EXPECT_NE(r.out.find(head + change), std::string::npos) << change << "\n" << r.out;
}

TEST(ResumeConfig, TheLayoutIsTheInvocationsAndAChangeIsAnnounced) {
  SavedRun f("global", "--dp 2 --zero 1");
  const auto r = run_meshtrain("train --load " + f.ck + " --steps 3 --progress none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string head = "meshtrain: resumed from step 2 of " + f.ck + "; changed: ";
  EXPECT_NE(r.out.find(head + "--dp 2 -> 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(head + "--zero 1 -> 0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| dp 1 |"), std::string::npos) << r.out;  // one worker now
}

TEST(ResumeConfig, ARunBegunFromALongerPositionTableResumes) {
  Fixture f;
  const std::string w = f.dir / "w16.safetensors", ck = f.dir / "ck";
  const std::string tiny = "train --layers 1 --dim 16 --heads 2 --batch 2 --steps 1 --quiet ";
  ASSERT_EQ(run_meshtrain(tiny + "--seq 16 --export " + w + " --data " + f.data).exit_code, 0);
  ASSERT_EQ(run_meshtrain("train --init-from " + w +
                          " --seq 8 --batch 2 --steps 1 --quiet --save " + ck + " --data " + f.data)
                .exit_code,
            0);
  // The checkpoint keeps the 16 rows; the resumed run uses 8 of them, as the first did.
  const auto r = run_meshtrain("train --load " + ck + " --steps 2 --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A refused resume prints its error and not the line of a resume (stdout came first once:
// "resuming from" above an error that refused the run); an accepted one names the checkpoint
// before what it changed.
TEST(ResumeConfig, ARefusedResumeAutoDoesNotSayItIsResuming) {
  SavedRun f;
  auto r = run_meshtrain("train --resume auto --save " + f.ck + " --steps 3 --layers 3");
  expect_usage_error(r, "--layers 3 contradicts");
  EXPECT_EQ(r.out.find("resuming from"), std::string::npos) << r.out;
  r = run_meshtrain("train --resume auto --save " + f.ck + " --steps 1");
  expect_usage_error(r, "beyond --steps 1");
  EXPECT_EQ(r.out.find("resuming from"), std::string::npos) << r.out;
  r = run_meshtrain("train --resume auto --save " + f.ck + " --steps 3 --progress none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t resuming = r.out.find("meshtrain: --resume auto: resuming from " + f.ck);
  ASSERT_NE(resuming, std::string::npos) << r.out;
  EXPECT_LT(resuming, r.out.find("changed: --steps 2 -> 3")) << r.out;
}

TEST(ResumeConfig, ShardedCheckpointsRecordTheRunToo) {
  SavedRun f("sharded");
  const auto r = run_meshtrain("train --resume auto --checkpoint-format sharded --save " + f.ck +
                               " --steps 3 --progress none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("changed: --steps 2 -> 3"), std::string::npos) << r.out;
  expect_usage_error(run_meshtrain("train --load " + f.ck + " --steps 4 --heads 2"),
                     "--heads 2 contradicts");
}

TEST(ResumeConfig, TheRecordIsCoveredByTheCheckpointChecksum) {
  SavedRun f;
  const std::string state = f.ck + "/state.json";
  nlohmann::json j = read_json(state);
  ASSERT_TRUE(j.contains("run")) << j.dump();
  EXPECT_EQ(j["run"]["model"]["layers"], 2);
  EXPECT_EQ(j["run"]["train"]["lr"], 3e-3);
  EXPECT_EQ(j["run"]["data"]["data"],
            std::filesystem::absolute(f.data).lexically_normal().string());
  j["run"]["model"]["layers"] = 3;  // a flipped bit in the record
  write_json(state, j);
  expect_usage_error(run_meshtrain("checkpoint verify " + f.ck), "checksum");
}

TEST(ResumeConfig, ACheckpointWithoutARecordLoadsAsBefore) {
  SavedRun f;
  const std::string state = f.ck + "/state.json";
  nlohmann::json j = read_json(state);
  j.erase("run");
  j.erase("checksum");
  seal_json(j);  // as a meshtrain from before the record wrote it
  write_json(state, j);
  // The shape must then be given, as before.
  auto r = run_meshtrain("train --load " + f.ck + f.shape +
                         "--batch 4 --steps 3 --progress none --data " + f.data);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("resumed from step"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace mt
