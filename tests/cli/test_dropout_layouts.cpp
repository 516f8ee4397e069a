// --dropout (issue #31 item 8): masks drawn by (seed, step, site, global token, feature), so
// every layout trains the same model as one worker with dropout on, in both blocks and
// precisions (the layouts of the llama block, bf16 and cp: tests/equivalence_dropout.cmake);
// evaluation runs without it; only a rate outside [0, 1) is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "data/token_shard.h"
#include "run_binary.h"

namespace mt {
namespace {

using testing::run_meshtrain;
using testing::slurp;
using testing::TempDir;

class Dropout : public ::testing::Test {
 protected:
  TempDir dir;
  std::string data = dir / "train.bin";
  void SetUp() override {
    std::vector<int> tokens;
    for (int i = 0; i < 4000; ++i) tokens.push_back((i * 11 + i / 7) % 53);
    write_token_shard(data, tokens);
  }
  // The step records' `key` values of a run.
  std::vector<double> run(const std::string& name, const std::string& flags,
                          const char* key = "loss") {
    const std::string m = dir / (name + ".jsonl");
    auto r = run_meshtrain(
        "train --layers 2 --dim 16 --heads 2 --seq 16 --batch 8 --steps 3 --threads 1 --quiet"
        " --data " +
        data + " --metrics " + m + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    std::vector<double> out;
    std::istringstream in(slurp(m));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("event") && j.contains(key)) out.push_back(j[key].get<double>());
    }
    return out;
  }
};

void expect_same_losses(const std::vector<double>& a, const std::vector<double>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5 * std::abs(b[i])) << what << ", step " << i + 1;
}

TEST_F(Dropout, EveryLayoutTrainsOneWorkersModel) {
  const std::string on = "--dropout 0.2 ";
  const std::vector<double> one = run("one", on);
  ASSERT_EQ(one.size(), 3u);
  EXPECT_NE(one, run("off", ""));  // the masks change the losses
  expect_same_losses(run("mb4", on + "--microbatches 4"), one, "4 microbatches");
  expect_same_losses(run("dp2", on + "--dp 2 --microbatches 2"), one, "dp 2");
  expect_same_losses(run("pp2", on + "--pp 2 --microbatches 4"), one, "pp 2");
  expect_same_losses(run("tp2", on + "--tp 2"), one, "tp 2");
  expect_same_losses(run("tp2sp", on + "--tp 2 --sequence-parallel"), one, "tp 2 with sp");
  expect_same_losses(run("full", on + "--recompute full"), one, "full recomputation");
  expect_same_losses(run("sel", on + "--recompute selective"), one, "selective recomputation");
  expect_same_losses(run("zb", on + "--pp 2 --microbatches 4 --schedule zb-h1"), one, "zb-h1");
  // MoE: the aux loss groups are (dp rank, microbatch), so ep is compared at the same dp.
  const std::string moe = on + "--experts 4 --topk 2 --dp 2 ";
  expect_same_losses(run("moe_ep2", moe + "--ep 2"), run("moe", moe), "MoE, ep 2");
}

// Evaluation runs without dropout: with a learning rate too small to move a weight, the
// validation loss after step 1 is the same with and without --dropout (the training loss
// is not). In each block, precision and under cp (the llama block's flash core, the ring).
// The gpt2 block's attention under --dropout is the flash core, whose rounding differs from
// the (T, T) kernel's run without it: there equal to 1e-6, where the dropped training loss is
// further than 1e-5 away (at init the logits are near uniform: dropout moves the loss little).
TEST_F(Dropout, EvaluationRunsWithoutIt) {
  const std::string frozen =
      "--steps 1 --lr 1e-30 --warmup 0 --lr-schedule constant --eval-every 1 --eval-batches 2 "
      "--val-data " +
      data + " ";
  for (const std::string model :
       {"", "--arch llama ", "--arch llama --cp 2 ", "--arch llama --precision bf16 ", "--cp 2 "}) {
    SCOPED_TRACE(model);
    const auto val_on = run("val_on", frozen + model + "--dropout 0.5", "val_loss");
    const auto val_off = run("val_off", frozen + model, "val_loss");
    ASSERT_EQ(val_on.size(), 1u);
    ASSERT_EQ(val_off.size(), 1u);
    // Bit for bit where both runs take the flash core (llama, cp).
    EXPECT_NEAR(val_on[0], val_off[0], model.empty() ? 1e-6 * val_off[0] : 0.0);
    const auto train_on = run("train_on", frozen + model + "--dropout 0.5");
    const auto train_off = run("train_off", frozen + model);
    ASSERT_EQ(train_on.size(), 1u);
    ASSERT_EQ(train_off.size(), 1u);
    EXPECT_GT(std::abs(train_on[0] - train_off[0]), 1e-5 * train_off[0]);
  }
}

TEST_F(Dropout, OnlyAProbabilityIsRefused) {
  for (const char* flags : {"--dropout 1", "--dropout -0.1"}) {
    auto r = run_meshtrain(std::string("train --steps 1 --quiet --data ") + data + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
    EXPECT_NE(r.err.find("meshtrain: error: --dropout"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace mt
