// --trace under --cp: every rank's track shows each ring step of the forward and the backward
// (docs/context_parallel.md, "The trace"), so Perfetto draws the ring.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "run_binary.h"

namespace mt {
namespace {

using testing::run_meshtrain;
using testing::slurp;
using testing::TempDir;

// (rank, name) of every event of the trace.
std::set<std::pair<int, std::string>> spans(const std::string& path) {
  std::set<std::pair<int, std::string>> out;
  const nlohmann::json trace = nlohmann::json::parse(slurp(path));
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "X") out.insert({e["tid"].get<int>(), e["name"].get<std::string>()});
  return out;
}

std::string train(const TempDir& d, const std::string& flags) {
  const std::string path = d / "trace.json";
  auto r = run_meshtrain(
      "train --arch llama --layers 1 --dim 64 --heads 8 --kv-heads 4 --ffn-dim 96 --seq 48 "
      "--batch 2 --steps 1 --quiet --trace " +
      path + " " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return path;
}

TEST(ContextParallelTrace, EveryRankShowsEachRingStep) {
  TempDir d;
  const auto got = spans(train(d, "--cp 3"));
  for (int rank = 0; rank < 3; ++rank) {
    for (int step = 0; step < 3; ++step) {
      const std::string source = std::to_string((rank + 3 - step) % 3);
      for (const char* pass : {"F", "B"})
        EXPECT_TRUE(got.count(
            {rank, "cp ring " + std::string(pass) + std::to_string(step) + " K/V of cp " + source}))
            << "rank " << rank << " " << pass << step;
    }
    EXPECT_TRUE(got.count({rank, "cp ring B home"})) << rank;
  }
}

TEST(ContextParallelTrace, AllGatherShowsItsCollectives) {
  TempDir d;
  const auto got = spans(train(d, "--cp 2 --cp-comm allgather"));
  for (int rank = 0; rank < 2; ++rank)
    for (const char* name : {"cp all-gather K/V", "cp reduce-scatter dK/dV",
                             "cp allgather F1 K/V of cp ", "cp allgather B1 K/V of cp "}) {
      std::string want = name;
      if (want.back() == ' ') want += std::to_string(1 - rank);
      EXPECT_TRUE(got.count({rank, want})) << rank << " " << want;
    }
}

TEST(ContextParallelTrace, NoRingSpansWithoutCp) {
  TempDir d;
  for (const auto& [rank, name] : spans(train(d, "")))
    EXPECT_EQ(name.rfind("cp ", 0), std::string::npos) << name;
}

}  // namespace
}  // namespace mt
