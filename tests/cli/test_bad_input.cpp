// Bad input gets one clear line on stderr ("meshtrain: error: ...") and exit code 2, and
// nothing is left half-written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <vector>

#include "cli_fixture.h"
#include "data/token_shard.h"
#include "run_binary.h"
#include "train/safetensors.h"

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_meshtrain;
using testing::TempDir;

TEST(BadInput, UnknownFlag) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --no-such-flag 3"), "no-such-flag");
}

TEST(BadInput, UnknownCommandIsNamed) {
  expect_usage_error(run_meshtrain("tarin --steps 3"), "unknown command 'tarin'");
}

TEST(BadInput, HeadsMustDivideDim) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --heads 3"), "--heads 3 does not divide --dim 16");
}

TEST(BadInput, ZeroAndNegativeSizes) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --layers 0"),
                     "--layers must be in 1..4096 (got 0)");
  expect_usage_error(run_meshtrain(f.base() + " --batch -1"),
                     "--batch must be in 1..1048576 (got -1)");
  expect_usage_error(run_meshtrain(f.base() + " --dp 0"), "--dp must be in 1..1048576 (got 0)");
  expect_usage_error(run_meshtrain(f.base() + " --lr 0"),
                     "--lr must be > 0 and <= 3.402823466e+38 (got 0)");
}

TEST(BadInput, BatchMustSplitOverReplicasAndMicrobatches) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --batch 3 --microbatches 2"),
                     "--batch 3 must be divisible");
}

TEST(BadInput, BadChoices) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --lr-schedule linear"), "--lr-schedule");
  expect_usage_error(run_meshtrain(f.base() + " --backend nccl"), "--backend");
  expect_usage_error(run_meshtrain(f.base() + " --zero 4"), "--zero");
}

TEST(BadInput, MissingTruncatedAndWrongMagicData) {
  Fixture f;
  expect_usage_error(run_meshtrain("train" + f.tiny + "--data " + (f.dir / "nope.bin")),
                     "nope.bin");
  // Truncated: drop the last byte.
  std::filesystem::copy_file(f.data, f.dir / "short.bin");
  std::filesystem::resize_file(f.dir / "short.bin", std::filesystem::file_size(f.data) - 1);
  expect_usage_error(run_meshtrain("train" + f.tiny + "--data " + (f.dir / "short.bin")),
                     "short.bin");
  // Wrong magic.
  std::filesystem::copy_file(f.data, f.dir / "magic.bin");
  {
    std::fstream io(f.dir / "magic.bin", std::ios::in | std::ios::out | std::ios::binary);
    int32_t bad = 12345;
    io.write(reinterpret_cast<const char*>(&bad), 4);
  }
  expect_usage_error(run_meshtrain("train" + f.tiny + "--data " + (f.dir / "magic.bin")), "magic");
}

TEST(BadInput, DataTooSmallForOneBatch) {
  Fixture f;
  expect_usage_error(run_meshtrain(f.base() + " --batch 64"), "train.bin");
}

TEST(BadInput, InitFromMismatchedFiles) {
  Fixture f;
  const std::string good = f.dir / "w.safetensors";
  auto r = run_meshtrain(f.base() + " --steps 0 --export " + good);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // --seq longer than the file's position table.
  expect_usage_error(run_meshtrain("train --quiet --batch 2 --steps 1 --data " + f.data +
                                   " --init-from " + good + " --seq 16"),
                     "longer than the position table");
  // A tensor missing: rewrite the file without ln_f.bias.
  {
    SafetensorsFile in(good);
    std::vector<std::vector<float>> keep;
    std::vector<SafetensorsTensor> tensors;
    std::vector<std::string> names = in.names();
    for (const auto& n : names) {
      if (n == "transformer.ln_f.bias") continue;
      keep.push_back(in.read(n));
    }
    size_t k = 0;
    for (const auto& n : names) {
      if (n == "transformer.ln_f.bias") continue;
      tensors.push_back({n, in.tensor(n).shape, keep[k++].data()});
    }
    write_safetensors(f.dir / "missing.safetensors", tensors);
  }
  expect_usage_error(run_meshtrain("train --quiet --batch 2 --steps 1 --heads 2 --data " + f.data +
                                   " --init-from " + (f.dir / "missing.safetensors")),
                     "transformer.ln_f.bias");
  // A mis-shaped tensor.
  {
    SafetensorsFile in(good);
    std::vector<std::vector<float>> keep;
    std::vector<SafetensorsTensor> tensors;
    for (const auto& n : in.names()) keep.push_back(in.read(n));
    size_t k = 0;
    for (const auto& n : in.names()) {
      TensorShape shape = in.tensor(n).shape;
      if (n == "transformer.h.0.mlp.c_fc.bias") shape = {int64_t(keep[k].size() / 2), 2};
      tensors.push_back({n, shape, keep[k++].data()});
    }
    write_safetensors(f.dir / "shape.safetensors", tensors);
  }
  expect_usage_error(run_meshtrain("train --quiet --batch 2 --steps 1 --heads 2 --data " + f.data +
                                   " --init-from " + (f.dir / "shape.safetensors")),
                     "transformer.h.0.mlp.c_fc.bias");
}

// Copies the weights file `in` to `out` with metadata `meta`, leaving out the tensors
// `drop` names.
void rewrite_weights(const std::string& in, const std::string& out,
                     const std::map<std::string, std::string>& meta,
                     const std::function<bool(const std::string&)>& drop = {}) {
  SafetensorsFile f(in);
  std::vector<std::vector<float>> keep;
  std::vector<SafetensorsTensor> tensors;
  for (const auto& n : f.names())
    if (!drop || !drop(n)) keep.push_back(f.read(n));
  size_t k = 0;
  for (const auto& n : f.names())
    if (!drop || !drop(n)) tensors.push_back({n, f.tensor(n).shape, keep[k++].data()});
  write_safetensors(out, tensors, meta);
}

TEST(BadInput, MetadataThatIsNotAPositiveInteger) {
  Fixture f;
  const std::string good = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 0 --export " + good).exit_code, 0);
  const auto meta = SafetensorsFile(good).metadata();
  int i = 0;
  for (const std::string bad : {"abc", "99999999999", "0", "-2", "2x", ""}) {
    const std::string path = f.dir / ("bad" + std::to_string(i++) + ".safetensors");
    auto m = meta;
    m["heads"] = bad;
    rewrite_weights(good, path, m);
    const std::string want =
        path + ": metadata \"heads\" is \"" + bad + "\", not a positive integer";
    expect_usage_error(run_meshtrain("train --quiet --batch 2 --steps 1 --data " + f.data +
                                     " --init-from " + path),
                       want);
    expect_usage_error(run_meshtrain("sample --tokens 2 --init-from " + path), want);
  }
}

TEST(BadInput, MixtureOfExpertsFileWithoutTopk) {
  Fixture f;
  const std::string moe = f.dir / "moe.safetensors";
  ASSERT_EQ(run_meshtrain("train --layers 2 --dim 16 --heads 2 --seq 8 --batch 2 --steps 0 "
                          "--quiet --experts 4 --topk 2 --data " +
                          f.data + " --export " + moe)
                .exit_code,
            0);
  // As written before top-k was recorded: no experts, topk, moe_every, capacity_factor.
  const std::string old = f.dir / "old.safetensors";
  auto meta = SafetensorsFile(moe).metadata();
  for (const char* k : {"experts", "topk", "moe_every", "capacity_factor"})
    ASSERT_EQ(meta.erase(k), 1u) << k;
  rewrite_weights(moe, old, meta);
  expect_usage_error(run_meshtrain("sample --tokens 2 --init-from " + old),
                     old +
                         " is a mixture-of-experts model (4 experts) without top-k in its "
                         "metadata: give --topk K");
  auto s = run_meshtrain("sample --tokens 2 --topk 2 --init-from " + old);
  EXPECT_EQ(s.exit_code, 0) << s.err;
  // train has a top-k of its own (the flag or its default).
  auto t = run_meshtrain("train --quiet --batch 2 --steps 1 --topk 1 --data " + f.data +
                         " --init-from " + old);
  EXPECT_EQ(t.exit_code, 0) << t.err;

  // Bad top-k metadata, and routers that do not follow one --moe-every.
  auto m = SafetensorsFile(moe).metadata();
  m["topk"] = "two";
  rewrite_weights(moe, f.dir / "topk.safetensors", m);
  expect_usage_error(run_meshtrain("sample --tokens 2 --init-from " + (f.dir / "topk.safetensors")),
                     "metadata \"topk\" is \"two\", not a positive integer");
  m["topk"] = "5";
  rewrite_weights(moe, f.dir / "topk5.safetensors", m);
  expect_usage_error(
      run_meshtrain("sample --tokens 2 --init-from " + (f.dir / "topk5.safetensors")),
      "metadata \"topk\" is 5 but the file has 4 experts");
  const std::string holes = f.dir / "holes.safetensors";
  rewrite_weights(moe, holes, SafetensorsFile(moe).metadata(), [](const std::string& n) {
    return n.starts_with("transformer.h.1.mlp.router.");
  });
  expect_usage_error(run_meshtrain("sample --tokens 2 --init-from " + holes),
                     holes +
                         ": the first mixture-of-experts block is 0 (every 1) but block 1 "
                         "has no router");
}

TEST(BadInput, CorruptLoadDirectory) {
  Fixture f;
  const std::string ck = f.dir / "ck";
  auto r = run_meshtrain(f.base() + " --save " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Not a checkpoint at all.
  expect_usage_error(run_meshtrain(f.base() + " --load " + (f.dir / "nothing")), "--load");
  // state.json garbled.
  {
    std::ofstream out(ck + "/state.json");
    out << "{ not json";
  }
  expect_usage_error(run_meshtrain(f.base() + " --steps 4 --load " + ck), "state.json");
  // Weights truncated.
  r = run_meshtrain(f.base() + " --save " + ck);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::filesystem::resize_file(ck + "/model.safetensors", 100);
  expect_usage_error(run_meshtrain(f.base() + " --steps 4 --load " + ck), "model.safetensors");
}

TEST(BadInput, ConfigFileErrors) {
  Fixture f;
  {
    std::ofstream out(f.dir / "bad.toml");
    out << "[model]\nlayerz = 3\n";
  }
  expect_usage_error(run_meshtrain(f.base() + " --config " + (f.dir / "bad.toml")), "layerz");
  {
    std::ofstream out(f.dir / "type.toml");
    out << "[train]\nlr = \"fast\"\n";
  }
  expect_usage_error(run_meshtrain(f.base() + " --config " + (f.dir / "type.toml")), "lr");
}

TEST(BadInput, NothingHalfWrittenOnFailure) {
  Fixture f;
  const std::string out = f.dir / "never.safetensors";
  auto r = run_meshtrain(f.base() + " --heads 3 --export " + out);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(out));
  for (const auto& e : std::filesystem::directory_iterator(f.dir.path))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace mt
