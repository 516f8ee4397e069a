// The shuffled training order is the same in every layout and across a resume in another
// layout (issue #31 item 1): each step record carries data_hash, a hash of where every
// sequence of its global batch starts in the data.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "data/token_shard.h"
#include "run_binary.h"

namespace mt {
namespace {

using testing::run_command;
using testing::slurp;
using testing::TempDir;

struct Steps {
  std::vector<std::string> hashes;
  std::vector<double> losses;
};

Steps steps_of(const std::string& metrics) {
  Steps r;
  std::istringstream in(slurp(metrics));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    if (j.contains("event")) continue;
    r.hashes.push_back(j.at("data_hash").get<std::string>());
    r.losses.push_back(j.at("loss").get<double>());
  }
  return r;
}

class TrainDataOrder : public ::testing::Test {
 protected:
  TempDir dir;
  std::string data = dir / "train.bin";
  void SetUp() override {
    std::vector<int> tokens;
    for (int i = 0; i < 3000; ++i) tokens.push_back((i * 7 + i / 13) % 61);
    write_token_shard(data, tokens);
  }
  // Trains and returns its step records; the sample index goes to this test's cache.
  Steps train(const std::string& name, const std::string& flags) {
    const std::string m = dir / (name + ".jsonl");
    auto r = run_command("XDG_CACHE_HOME='" + (dir / "cache") + "' " + MESHTRAIN_BIN +
                         " train --layers 2 --dim 16 --heads 2 --seq 16 --batch 8 --threads 1"
                         " --quiet --data " +
                         data + " --metrics " + m + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << name << ": " << r.err;
    return steps_of(m);
  }
};

TEST_F(TrainDataOrder, ShuffledSamplesAreTheSameInEveryLayoutAndAfterAResume) {
  const Steps one = train("dp1", "--steps 6");
  ASSERT_EQ(one.hashes.size(), 6u);
  EXPECT_EQ(train("dp4", "--steps 6 --dp 4").hashes, one.hashes);
  EXPECT_EQ(train("pp2", "--steps 6 --pp 2 --microbatches 2").hashes, one.hashes);
  // Three steps in dp 2, then resumed for three more in pp 2.
  train("first", "--steps 3 --dp 2 --save " + (dir / "ck"));
  const Steps rest = train("rest", "--steps 6 --pp 2 --microbatches 4 --load " + (dir / "ck"));
  ASSERT_EQ(rest.hashes.size(), 3u);
  EXPECT_EQ(rest.hashes, std::vector<std::string>(one.hashes.begin() + 3, one.hashes.end()));
  // The order is not the sequential one, which stays available (and layout-free too).
  const Steps seq = train("seq", "--steps 6 --data-order sequential");
  EXPECT_NE(seq.hashes, one.hashes);
  EXPECT_EQ(train("seq_dp2", "--steps 6 --dp 2 --data-order sequential").hashes, seq.hashes);
}

}  // namespace
}  // namespace mt
