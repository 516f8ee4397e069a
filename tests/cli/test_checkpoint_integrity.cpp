// Issue #26, what reaches disk and what a load trusts: checksums over checkpoint metadata,
// the overflow-checked manifest reader, readers that never wait on a FIFO, and the one
// finiteness gate before weights are written (bf16 export, export --from, DiLoCo's outer
// step). Each test fails on the code before the fix.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "core/crc32c.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/metadata_checksum.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using json = nlohmann::json;
using testing::expect_usage_error;
using testing::Fixture;
using testing::run_command;
using testing::run_meshtrain;
using testing::RunResult;
using testing::slurp;

const std::string kSharded = " --checkpoint-format sharded ";

std::string step_dir(const std::string& root, int step) {
  return root + "/" + step_dir_name(step);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Flips the one bit that turns `"step": 3` into `"step": 2` ('3' = 0x33, '2' = 0x32).
void flip_step_bit(const std::string& path, const std::string& key_then_value) {
  std::string text = slurp(path);
  const size_t at = text.find(key_then_value);
  ASSERT_NE(at, std::string::npos) << key_then_value << " in " << text.substr(0, 200);
  text[at + key_then_value.size() - 1] ^= 0x01;
  write_bytes(path, text);
}

// A deliberate edit of a manifest: the change, then the checksum recomputed, so that the
// checks behind the checksum are what is tested.
void edit_manifest(const std::string& dir, const std::function<void(json&)>& edit) {
  json m = json::parse(slurp(dir + "/manifest.json"));
  edit(m);
  seal_json(m);
  write_bytes(dir + "/manifest.json", m.dump());
}

// Case B2: a one-bit flip of the step in manifest.json or state.json resumed at the wrong
// step, and `checkpoint verify` said ok.
TEST(CheckpointIntegrity, AFlippedBitInTheMetadataIsCaught) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 3 --save-every 1 --save " + root).exit_code, 0);
  flip_step_bit(step_dir(root, 3) + "/manifest.json", "\"step\":3");
  expect_usage_error(run_meshtrain("checkpoint verify " + step_dir(root, 3)), "fails its checksum");
  expect_usage_error(run_meshtrain(f.base() + " --steps 5 --load " + step_dir(root, 3)),
                     "fails its checksum");
  RunResult r = run_meshtrain(f.base() + kSharded + " --steps 4 --resume auto --save " + root +
                              " --save-every 0");
  // step_000003 is in the way of nothing (this run saves step 4 only); it resumes from 2.
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("skipping " + step_dir(root, 3)), std::string::npos) << r.err;

  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 3 --save " + ck).exit_code, 0);
  flip_step_bit(ck + "/state.json", "\"step\": 3");
  expect_usage_error(run_meshtrain("checkpoint verify " + ck), "state.json fails its checksum");
  expect_usage_error(run_meshtrain(f.base() + " --steps 5 --load " + ck), "fails its checksum");
}

// Checkpoints written before metadata checksums are refused, clearly, with the way to use
// their (still checksummed) weights.
TEST(CheckpointIntegrity, MetadataWithoutAChecksumIsRefusedWithAWayOut) {
  Fixture f;
  const std::string ck = f.dir / "ck";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 2 --save " + ck).exit_code, 0);
  json j = json::parse(slurp(ck + "/state.json"));
  j.erase("checksum");
  write_bytes(ck + "/state.json", j.dump(2));
  RunResult r = run_meshtrain(f.base() + " --steps 4 --load " + ck);
  expect_usage_error(r, "has no checksum");
  EXPECT_NE(r.err.find("--init-from " + ck + "/model.safetensors"), std::string::npos) << r.err;
  r = run_meshtrain(f.base() + " --steps 4 --init-from " + ck + "/model.safetensors");
  EXPECT_EQ(r.exit_code, 0) << r.err;

  const std::string root = f.dir / "root";
  ASSERT_EQ(run_meshtrain(f.base() + kSharded + " --steps 2 --save " + root).exit_code, 0);
  json m = json::parse(slurp(step_dir(root, 2) + "/manifest.json"));
  m.erase("checksum");
  write_bytes(step_dir(root, 2) + "/manifest.json", m.dump());
  expect_usage_error(run_meshtrain("checkpoint verify " + step_dir(root, 2)), "has no checksum");
}

// Case C4: a crafted run count (2^62) passed the range checks and allocated until memory ran
// out. Every integer is now range-checked with overflow-checked arithmetic before anything is
// allocated (the limit on address space turns an allocation into a failure, not a hang).
TEST(CheckpointIntegrity, CraftedManifestIntegersFailBeforeAnyAllocation) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(run_meshtrain(f.base() + kSharded + " --steps 1 --save " + root).exit_code, 0);
  const std::string d = step_dir(root, 1);
  const std::string pristine = slurp(d + "/manifest.json");
  const auto verify_limited = [&] {
    return run_command("ulimit -v 4000000; timeout 60 " + std::string(MESHTRAIN_BIN) +
                       " checkpoint verify " + d);
  };
  const int64_t huge = int64_t(1) << 62;
  // A run of 2^62 intervals of 4 elements, 4 apart: (count - 1) * stride wraps to -4, so
  // the old bound start + (count - 1) * stride + len <= numel held, and the coverage check
  // expanded 2^62 intervals.
  edit_manifest(d, [&](json& m) { m["segments"][0]["runs"][0] = {0, 4, huge, 4}; });
  expect_usage_error(verify_limited(), "outside");
  // A shape whose element count overflows int64.
  write_bytes(d + "/manifest.json", pristine);
  edit_manifest(d, [](json& m) { m["tensors"][0]["shape"] = {4294967296, 4294967296}; });
  expect_usage_error(verify_limited(), "elements");
  // A file size no disk holds, and a length that wraps the segment's byte count.
  write_bytes(d + "/manifest.json", pristine);
  edit_manifest(d, [&](json& m) { m["files"][0]["bytes"] = huge; });
  expect_usage_error(verify_limited(), "block checksums");
  write_bytes(d + "/manifest.json", pristine);
  edit_manifest(d, [&](json& m) { m["segments"][0]["runs"][0][1] = huge; });
  expect_usage_error(verify_limited(), "outside");
}

// Case C1 for checkpoints: a FIFO in place of a manifest (or the checkpoint log) never hangs
// a reader; retention used to open an old checkpoint's manifest.json with a blocking read.
TEST(CheckpointIntegrity, FifosInCheckpointsAreNeverWaitedOn) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(
      run_meshtrain(f.base() + kSharded + " --steps 3 --save-every 1 --save " + root).exit_code, 0);
  fs::remove(step_dir(root, 1) + "/manifest.json");
  ASSERT_EQ(::mkfifo((step_dir(root, 1) + "/manifest.json").c_str(), 0600), 0);
  const std::string bin = "timeout 60 " + std::string(MESHTRAIN_BIN) + " ";
  expect_usage_error(run_command(bin + "checkpoint verify " + step_dir(root, 1)), "FIFO");
  RunResult r =
      run_command(bin + f.base() + kSharded +
                  " --steps 4 --save-every 1 --keep-checkpoints 1 --resume auto --save " + root);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(step_dir(root, 1)));  // not provably a checkpoint: not deleted
  fs::remove(root + "/checkpoint_log.json");
  ASSERT_EQ(::mkfifo((root + "/checkpoint_log.json").c_str(), 0600), 0);
  // The log is rewritten at every save: refused before training, not waited on or replaced.
  r = run_command(bin + f.base() + kSharded + " --steps 5 --resume auto --save " + root);
  expect_usage_error(r, "checkpoint_log.json");
  EXPECT_NE(r.err.find("FIFO"), std::string::npos) << r.err;
}

// Case B1: --export-dtype bf16 turned fp32 values near 3.4e38 into Inf, exit 0.
TEST(CheckpointIntegrity, ABf16ExportThatWouldHoldInfIsRefused) {
  Fixture f;
  const std::string w = f.dir / "w.safetensors", big = f.dir / "big.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 1 --export " + w).exit_code, 0);
  // 3.4e38 is a finite float; bf16's largest is 3.39e38, so it rounds to Inf.
  std::string bytes = slurp(w);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const json h = json::parse(bytes.substr(8, size_t(header)));
  const uint64_t at = 8 + header + h["transformer.ln_f.weight"]["data_offsets"][0].get<uint64_t>();
  const float x = 3.4e38f;
  std::memcpy(bytes.data() + at + 4, &x, 4);
  write_bytes(big, bytes);
  const std::string out = f.dir / "out.safetensors";
  RunResult r = run_meshtrain(f.base() + " --steps 0 --init-from " + big +
                              " --export-dtype bf16 --export " + out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 0: not writing " + out + ": tensor transformer.ln_f.weight element 1"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("inf in bf16"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  // The same weights in fp32 are finite and written.
  r = run_meshtrain(f.base() + " --steps 0 --init-from " + big + " --export " + out);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Case B1: `export --from` did not check for non-finite values.
TEST(CheckpointIntegrity, ExportFromACheckpointHoldingNanIsRefused) {
  Fixture f;
  const std::string root = f.dir / "root";
  ASSERT_EQ(run_meshtrain(f.base() + kSharded + " --steps 1 --save " + root).exit_code, 0);
  const std::string d = step_dir(root, 1), shard = d + "/rank_00000.bin";
  std::string bytes = slurp(shard);
  const float nan = std::nanf("");
  std::memcpy(bytes.data(), &nan, 4);  // element 0 of the first segment's tensor
  write_bytes(shard, bytes);
  std::string first_tensor;
  edit_manifest(d, [&](json& m) {  // an edit, not damage: the block checksum matches again
    const size_t n = std::min<size_t>(bytes.size(), size_t(1) << 20);
    m["files"][0]["crc32c"][0] = crc32c_hex(crc32c_update(0, bytes.data(), n));
    for (const json& seg : m["segments"])
      if (seg["file"] == 0 && seg["offset"] == 0) first_tensor = seg["tensor"];
  });
  // A rank's file starts with the weights of its first piece (then that piece's moments).
  ASSERT_FALSE(first_tensor.empty());
  ASSERT_EQ(first_tensor.find(".exp_avg"), std::string::npos) << first_tensor;
  // Every checksum matches the edit, but a load would refuse the value: so does verify,
  // and export, which verifies first.
  expect_usage_error(run_meshtrain("checkpoint verify " + d),
                     "tensor " + first_tensor + " holds NaN or Inf");
  const std::string out = f.dir / "out.safetensors";
  expect_usage_error(run_meshtrain("export --from " + d + " --to " + out),
                     "tensor " + first_tensor + " holds NaN or Inf");
  EXPECT_FALSE(fs::exists(out));
}

// Case B1 and E: the DiLoCo outer step ran after the finiteness check (--outer-lr 1e39 made
// every exported weight NaN, exit 0), and its divergence was blamed on --lr.
TEST(CheckpointIntegrity, TheDiLoCoOuterStepCannotWriteNonFiniteWeights) {
  Fixture f;
  const std::string out = f.dir / "w.safetensors";
  const std::string diloco = f.base() + " --dp 2 --dp-sync diloco:2 --export " + out;
  expect_usage_error(run_meshtrain(diloco + " --steps 2 --outer-lr 1e39"), "--outer-lr");
  RunResult r = run_meshtrain(diloco + " --steps 2 --lr 1 --outer-lr 3e38");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("step 2: the DiLoCo outer step (--outer-lr 3e+38"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
  // Finite but huge: the next step's loss is non-finite, and the message names the outer step.
  r = run_meshtrain(diloco + " --steps 4 --outer-lr 1e30");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("outer step, last at step 2 with --outer-lr 1e+30"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace mt
