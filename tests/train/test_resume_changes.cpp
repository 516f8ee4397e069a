// The rules of a resumed run against its checkpoint's record (train/resume_changes.h), without
// the binary: which changes are refused, which are announced and how.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/resume_changes.h"

namespace mt {
namespace {

TrainOptions llama() {
  TrainOptions o;
  o.model.arch = Arch::llama;
  o.model.layers = 2, o.model.dim = 64, o.model.heads = 4, o.model.seq = 16;
  return o;
}

TEST(ResumeChanges, AShapeChangeIsRefusedNamingBothValues) {
  TrainOptions before = llama(), now = llama();
  now.model.layers = 3;
  try {
    resume_change_lines({{"layers", "2", "3"}}, before, now, 10, "ck");
    ADD_FAILURE() << "a change of --layers was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--layers 3 contradicts the checkpoint ck, whose model has --layers 2"),
              std::string::npos)
        << e.what();
  }
}

TEST(ResumeChanges, TheShapeIsComparedAsTheModelUsesIt) {
  // --kv-heads 0 means --heads: the same model in other words, neither refused nor announced.
  TrainOptions before = llama(), now = llama();
  now.model.kv_heads = 4;
  EXPECT_TRUE(resume_change_lines({{"kv-heads", "0", "4"}}, before, now, 10, "ck").empty());
}

TEST(ResumeChanges, RopeTakesAnotherSeqButLearnedPositionsDoNot) {
  TrainOptions before = llama(), now = llama();
  now.model.seq = 32;
  const auto lines = resume_change_lines({{"seq", "16", "32"}}, before, now, 10, "ck");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "resumed from step 10 of ck; changed: --seq 16 -> 32");
  before.model.arch = now.model.arch = Arch::gpt2;
  EXPECT_THROW(resume_change_lines({{"seq", "16", "32"}}, before, now, 10, "ck"), UsageError);
}

TEST(ResumeChanges, AScheduleChangeSaysWhatTheNextUpdateTakes) {
  TrainOptions before = llama(), now = llama();
  now.optim.lr_schedule = LrKind::constant;
  now.optim.lr = 5e-4;
  const auto lines = resume_change_lines(
      {{"lr", "0.001", "0.0005"}, {"lr-schedule", "cosine", "constant"}}, before, now, 10, "ck");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "resumed from step 10 of ck; changed: --lr 0.001 -> 0.0005 (lr at step 11 "
            "is 5.00e-04)");
  EXPECT_EQ(lines[1],
            "resumed from step 10 of ck; changed: --lr-schedule cosine -> constant (lr "
            "at step 11 is 5.00e-04)");
}

// The data position counts draws of the recorded sample order: another order, or another
// seed's shuffled permutation, is refused naming both values; the seed of a sequential run
// (init and dropout only, the order has none) is announced.
TEST(ResumeChanges, TheSampleOrderIsPartOfTheRunResumed) {
  TrainOptions shuffled = llama(), sequential = llama();
  sequential.io.data_order = DataOrder::sequential;
  try {
    resume_change_lines({{"data-order", "shuffled", "sequential"}}, shuffled, sequential, 10, "ck");
    ADD_FAILURE() << "a change of --data-order was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--data-order sequential contradicts the checkpoint ck, "
                                         "whose run has --data-order shuffled"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(resume_change_lines({{"data-order", "sequential", "shuffled"}}, sequential, shuffled,
                                   10, "ck"),
               UsageError);
  try {
    resume_change_lines({{"seed", "1", "2"}}, shuffled, shuffled, 10, "ck");
    ADD_FAILURE() << "a change of the shuffle seed was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--seed 2 contradicts the checkpoint ck, whose run has "
                                         "--seed 1: its data position counts draws of that "
                                         "shuffled order"),
              std::string::npos)
        << e.what();
  }
  const auto lines = resume_change_lines({{"seed", "1", "2"}}, sequential, sequential, 10, "ck");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "resumed from step 10 of ck; changed: --seed 1 -> 2");
}

}  // namespace
}  // namespace mt
