// Issue #26: the one finiteness gate (train/finite_gate.h) sits inside every writer of
// weights, so a non-finite value is refused before any file is created, whoever calls it.
#include "train/finite_gate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "test_util/temp_dir.h"
#include "train/checkpoint/shard_writer.h"
#include "train/safetensors.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

TEST(FiniteGate, SafetensorsWriterRefusesBeforeCreatingAFile) {
  TempDir t;
  const std::string path = t / "w.safetensors";
  std::vector<float> a = {1, 2, 3, 4}, b = {0, std::nanf(""), 0};
  const SafetensorsTensor ts[] = {{"a", {4}, a.data()}, {"b", {3}, b.data()}};
  try {
    write_safetensors(path, ts);
    FAIL() << "a NaN was written";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor b element 1 is nan"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(t.path));  // no temporary either
  // An existing file stays as it was.
  std::ofstream(path) << "old";
  EXPECT_THROW(write_safetensors(path, ts), RuntimeError);
  std::ifstream in(path);
  std::string old;
  in >> old;
  EXPECT_EQ(old, "old");
}

TEST(FiniteGate, Bf16IsCheckedAsItWouldBeStored) {
  TempDir t;
  // 3.38e38 rounds to bf16's largest finite value; 3.4e38 rounds to Inf.
  std::vector<float> ok = {3.38e38f, -3.38e38f}, over = {1.0f, -3.4e38f};
  const SafetensorsTensor fits[] = {{"w", {2}, ok.data()}};
  write_safetensors(t / "ok.safetensors", fits, {}, /*as_bf16=*/true);
  const SafetensorsTensor rounds_to_inf[] = {{"w", {2}, over.data()}};
  write_safetensors(t / "f32.safetensors", rounds_to_inf);  // finite in fp32
  try {
    write_safetensors(t / "bf16.safetensors", rounds_to_inf, {}, /*as_bf16=*/true);
    FAIL() << "Inf was written as bf16";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("element 1 is -3.4e+38, which rounds to -inf in bf16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(t / "bf16.safetensors"));
}

TEST(FiniteGate, ShardWriterRefusesBeforeCreatingAFile) {
  TempDir t;
  std::vector<float> staged = {1, 2, 3, INFINITY, 5};
  std::vector<ManifestSegment> segs = {{"x", 0, 0, {{0, 2, 1, 0}}}, {"y", 0, 8, {{0, 3, 1, 0}}}};
  const std::string path = t / "rank_00000.bin";
  try {
    write_shard_file(path, staged.data(), staged.size(), segs);
    FAIL() << "Inf was written";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor y element 1 is inf"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  staged[3] = 4;
  EXPECT_EQ(write_shard_file(path, staged.data(), staged.size(), segs).bytes, 20u);
}

}  // namespace
}  // namespace mt
