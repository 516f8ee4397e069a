// A chunk hands each block's closing residual add to the next block's first norm
// (Block::forward_chained), and its last block's to the head's final norm
// (LMHead::forward_chained), except under --recompute full, where every block adds its own.
// The two must agree bit for bit: the same additions, one per element. So for both
// architectures and both precisions, --recompute none (chained) and --recompute full
// (unchained) give == losses, gradient norms and weights after the updates, on one worker
// and across a pipeline stage boundary (where the stage's last block must still send the
// summed stream). tests/train/test_recompute.cpp checks the GPT block in fp32 in more layouts.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util/temp_dir.h"
#include "train/session.h"
#include "train/session_tensors.h"
#include "train/step.h"
#include "train/validate_options.h"

namespace mt {
namespace {

constexpr int kSteps = 3;

using test_util::RankRun;

std::vector<RankRun> train(const TrainOptions& o) {
  return test_util::run_ranks(o, kSteps);
}

class ResidualChain : public ::testing::TestWithParam<std::tuple<bool, bool, int>> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test_util::TempDir;
    test_util::write_random_shard(*dir_ / "train.bin", 8192, 37, 11);
  }
  static void TearDownTestSuite() { delete dir_; }
  static test_util::TempDir* dir_;
};
test_util::TempDir* ResidualChain::dir_ = nullptr;

TEST_P(ResidualChain, ChainedBlocksEqualBlocksThatAddTheirOwn) {
  const auto [llama, bf16, pp] = GetParam();
  TrainOptions o = test_util::tiny_session_options(*dir_ / "train.bin", kSteps);
  if (llama) o.model.arch = Arch::llama;
  if (bf16) o.optim.precision = Precision::bf16;
  o.parallel.pp = pp;
  validate_train_options(o);
  const std::vector<RankRun> chained = train(o);
  ASSERT_TRUE(parse_recompute("full", &o.optim.recompute));
  validate_train_options(o);
  const std::vector<RankRun> own = train(o);
  ASSERT_EQ(own.size(), chained.size());
  for (size_t rank = 0; rank < own.size(); ++rank) {
    EXPECT_EQ(chained[rank].losses, own[rank].losses) << "rank " << rank;
    EXPECT_EQ(chained[rank].norms, own[rank].norms) << "rank " << rank;
    ASSERT_EQ(chained[rank].params.size(), own[rank].params.size());
    for (const auto& [name, w] : own[rank].params)
      EXPECT_TRUE(chained[rank].params.at(name) == w) << name << ", rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(ArchPrecisionStages, ResidualChain,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(1, 2)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "Llama" : "Gpt") +
                                  (std::get<1>(info.param) ? "Bf16" : "Fp32") + "Pp" +
                                  std::to_string(std::get<2>(info.param));
                         });

}  // namespace
}  // namespace mt
