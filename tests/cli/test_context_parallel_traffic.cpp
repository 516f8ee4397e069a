// The ring's traffic, from the step records' cp_comm_bytes (docs/context_parallel.md):
// per layer and microbatch, the forward passes N - 1 K/V blocks, the backward N - 1 K/V blocks
// and N dK/dV blocks, each block b x T/N rows x [K | V] of the Hkv kv heads only (GQA). Under
// --precision bf16 the K/V blocks travel in bf16 (half the bytes); dK/dV stay fp32.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run_binary.h"

namespace mt {
namespace {

using testing::run_meshtrain;
using testing::slurp;
using testing::TempDir;

int64_t first_step_cp_bytes(const std::string& precision, int cp) {
  TempDir d;
  const std::string metrics = d / "m.jsonl";
  auto r = run_meshtrain(
      "train --arch llama --layers 2 --dim 64 --heads 8 --kv-heads 4 --ffn-dim 96 --seq 32 "
      "--batch 2 --steps 1 --quiet --cp " +
      std::to_string(cp) + " --precision " + precision + " --metrics " + metrics);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(slurp(metrics));
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step")) return j["cp_comm_bytes"].get<int64_t>();
  }
  ADD_FAILURE() << "no step record";
  return -1;
}

TEST(ContextParallelTraffic, OnlyTheKvHeadsTravelAndBf16HalvesThem) {
  for (int N : {2, 4}) {
    // b 2, T/N rows, [K | V] of 4 kv heads of hd 8; 2 layers, one microbatch.
    const int64_t block = 2 * (32 / N) * 2 * 4 * 8, layers = 2;
    const int64_t kv = 2 * (N - 1) * block, dkv = N * block;
    EXPECT_EQ(first_step_cp_bytes("fp32", N), layers * (kv + dkv) * 4) << "cp " << N;
    EXPECT_EQ(first_step_cp_bytes("bf16", N), layers * (kv * 2 + dkv * 4)) << "cp " << N;
  }
}

}  // namespace
}  // namespace mt
