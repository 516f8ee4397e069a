// What the CLI tests share: a tiny model and data shard, and the check that a run failed
// the way bad input must (one "meshtrain: error:" line, exit 2).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "run_binary.h"

namespace mt::testing {

// A small model and a tiny data shard, so a run that should start does so in a second.
struct Fixture {
  TempDir dir;
  std::string data = dir / "train.bin";
  std::string tiny = " --layers 1 --dim 16 --heads 2 --seq 8 --batch 2 --steps 2 --quiet ";
  Fixture() {
    std::vector<int> tokens;
    for (int i = 0; i < 400; ++i) tokens.push_back((i * 7) % 256);
    write_token_shard(data, tokens);
  }
  std::string base() const { return "train" + tiny + "--data " + data; }
};

inline void expect_usage_error(const RunResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << "stderr: " << r.err;
  EXPECT_EQ(r.err.rfind("meshtrain: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
  // One line.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace mt::testing
