// What a global checkpoint holds and what verifying one proves (checkpoint_contents.h): the
// embedded tokenizer stored once, and a checkpoint whose checksums match but whose files
// lack what a load reads refused by verify, as the load would refuse it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/base64.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "test_util/temp_dir.h"
#include "test_util/usage_error.h"
#include "train/checkpoint/checkpoint_contents.h"
#include "train/checkpoint/metadata_checksum.h"
#include "train/global_view.h"
#include "train/safetensors.h"
#include "train/sealed_rewrite.h"
#include "train/tiny_checkpoint.h"
#include "train/tokenizer.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::reseal;
using test_util::rewrite_sealed;
using test_util::TempDir;
using test_util::TinyModel;

uint64_t checkpoint_bytes(const std::string& dir) {
  return fs::file_size(dir + "/model.safetensors") + fs::file_size(dir + "/optimizer.safetensors");
}

// A SentencePiece-sized tokenizer record carrying its model's bytes.
TokenizerRecord embedded_tokenizer(size_t bytes) {
  TokenizerRecord r;
  r.kind = "bpe";
  r.file = "/moved/away/tokenizer.model";
  for (size_t i = 0; i < bytes; ++i) r.model += char('a' + (i * 7919) % 26);
  r.crc32c = crc32c_update(0, r.model.data(), r.model.size());
  return r;
}

// #31 item 6 put the tokenizer's model into a checkpoint's metadata; it belongs in the model
// file, which sample and export read, and not a second time in the optimizer file.
TEST(GlobalCheckpoint, StoresTheEmbeddedTokenizerOnce) {
  TempDir dir;
  TinyModel tiny;
  const TokenizerRecord record = embedded_tokenizer(200000);
  const std::string encoded = base64_encode(record.model);
  tiny.save(dir / "plain", 1);
  tiny.save(dir / "with", 1, tokenizer_metadata(record));
  const uint64_t added = checkpoint_bytes(dir / "with") - checkpoint_bytes(dir / "plain");
  EXPECT_GE(added, encoded.size());
  EXPECT_LT(added, encoded.size() + 4096) << "the tokenizer is stored more than once";
  const SafetensorsFile optimizer(dir / "with/optimizer.safetensors");
  EXPECT_EQ(optimizer.metadata().count("tokenizer.model"), 0u);
  EXPECT_EQ(optimizer.metadata().count("tokenizer"), 0u);
  // It loads, and the model file gives the tokenizer back whole.
  EXPECT_TRUE(verify_checkpoint(dir / "with").verified);
  EXPECT_EQ(tiny.load(dir / "with").step, 1);
  const auto back = weights_tokenizer(dir / "with/model.safetensors");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, record);
  EXPECT_EQ(back->model, record.model);
}

// Checkpoints written before carry the tokenizer in both files: they verify and load as
// they did, the tokenizer read from the model file.
TEST(GlobalCheckpoint, ACheckpointWithTheTokenizerTwiceStillLoads) {
  TempDir dir;
  TinyModel tiny;
  const TokenizerRecord record = embedded_tokenizer(5000);
  tiny.save(dir / "old", 3, tokenizer_metadata(record));
  rewrite_sealed(dir / "old", "optimizer.safetensors", [&](auto&, auto&, auto& meta) {
    for (const auto& [k, v] : tokenizer_metadata(record)) meta[k] = v;
  });
  ASSERT_EQ(SafetensorsFile(dir / "old/optimizer.safetensors").metadata().count("tokenizer.model"),
            1u);
  EXPECT_TRUE(verify_checkpoint(dir / "old").verified);
  EXPECT_EQ(tiny.load(dir / "old").step, 3);
  EXPECT_EQ(weights_tokenizer(dir / "old/model.safetensors")->model, record.model);
}

// Damaged but checksummed: the writer left a tensor out (or wrote it at another shape) and
// state.json sealed the result. Checksums pass; verify must still refuse, naming the
// tensor, because --load would.
TEST(CheckpointVerify, RefusesWhatALoadWouldRefuseThoughEveryChecksumMatches) {
  TempDir dir;
  TinyModel tiny;
  tiny.save(dir / "missing", 2);
  rewrite_sealed(dir / "missing", "model.safetensors",
                 [](auto& data, auto&, auto&) { data.erase("transformer.ln_f.weight"); });
  EXPECT_THROW(tiny.load(dir / "missing"), UsageError);  // what a load does
  EXPECT_NE(test_util::refusal_of([&] {
              verify_checkpoint(dir / "missing");
            }).find("transformer.ln_f.weight"),
            std::string::npos);

  tiny.save(dir / "shape", 2);
  rewrite_sealed(dir / "shape", "optimizer.safetensors", [](auto& data, auto& shapes, auto&) {
    const std::string name = "transformer.wpe.weight.exp_avg_sq";
    data[name].resize(data[name].size() / 2);
    shapes[name] = {shapes[name][0] / 2, shapes[name][1]};
  });
  EXPECT_THROW(tiny.load(dir / "shape"), UsageError);
  EXPECT_NE(test_util::refusal_of([&] {
              verify_checkpoint(dir / "shape");
            }).find("transformer.wpe.weight.exp_avg_sq"),
            std::string::npos);

  // A layer fewer in the files than state.json records is named as the tensor missing.
  TinyModel two(2);
  two.save(dir / "layer", 2);
  rewrite_sealed(dir / "layer", "model.safetensors", [](auto& data, auto&, auto&) {
    std::erase_if(data, [](const auto& kv) { return kv.first.starts_with("transformer.h.1."); });
  });
  EXPECT_THROW(two.load(dir / "layer"), UsageError);
  EXPECT_NE(
      test_util::refusal_of([&] { verify_checkpoint(dir / "layer"); }).find("transformer.h.1."),
      std::string::npos);
  // The untouched checkpoint verifies (the check is not a refusal of everything).
  tiny.save(dir / "good", 2);
  EXPECT_EQ(test_util::usage_error_of([&] { verify_checkpoint(dir / "good"); }), "");
}

// A llama model's lm_head.weight is absent when tied and required when untied; only the
// recorded tie tells the two apart. An untied checkpoint whose writer left the head out is
// refused; a tied one verifies; one written before the record verifies and says it could not
// check the head.
TEST(CheckpointVerify, AnUntiedLlamaCheckpointWithoutItsHeadIsRefused) {
  TempDir dir;
  ModelConfig c = TinyModel::gpt2_of(1);
  c.arch = Arch::llama;
  c.tie_embeddings = false;
  TinyModel untied(c);
  untied.save(dir / "untied", 2);
  EXPECT_EQ(SafetensorsFile(dir / "untied/model.safetensors").metadata().at("tie_embeddings"),
            "false");
  EXPECT_TRUE(verify_checkpoint(dir / "untied").unchecked.empty());
  rewrite_sealed(dir / "untied", "model.safetensors",
                 [](auto& data, auto&, auto&) { data.erase("lm_head.weight"); });
  EXPECT_THROW(untied.load(dir / "untied"), UsageError);  // what a load does
  EXPECT_NE(
      test_util::refusal_of([&] { verify_checkpoint(dir / "untied"); }).find("lm_head.weight"),
      std::string::npos);

  c.tie_embeddings = true;
  TinyModel tied(c);
  tied.save(dir / "tied", 2);
  EXPECT_TRUE(verify_checkpoint(dir / "tied").unchecked.empty());

  // Before the record: the head is gone and so is the key; verify passes, naming what it
  // could not check.
  untied.save(dir / "old", 2);
  rewrite_sealed(dir / "old", "model.safetensors", [](auto& data, auto&, auto& meta) {
    data.erase("lm_head.weight");
    meta.erase("tie_embeddings");
  });
  const CheckpointVerification old = verify_checkpoint(dir / "old");
  EXPECT_TRUE(old.verified);
  ASSERT_EQ(old.unchecked.size(), 1u);
  EXPECT_EQ(old.unchecked[0].rfind("lm_head.weight (", 0), 0u) << old.unchecked[0];
}

// A sharded manifest that lists a tensor short, or at another shape, sealed: the load
// names the tensor it lacks; so does verify (the manifest against its own model).
TEST(CheckpointVerify, AManifestMustListEveryTensorItsModelNeeds) {
  Manifest m;
  m.model.layers = 1, m.model.dim = 8, m.model.heads = 2, m.model.seq = 4, m.model.vocab = 16;
  m.model.experts = 4, m.model.topk = 2, m.model.moe_every = 1;
  for (const CheckpointTensor& t : checkpoint_tensors(m.model))
    m.tensors.push_back({t.name, t.shape});
  EXPECT_EQ(test_util::usage_error_of([&] { check_manifest_contents(m, "ck/manifest.json"); }), "");
  size_t biases = 0, moments = 0;
  for (const CheckpointTensor& t : checkpoint_tensors(m.model)) {
    biases += t.kind == CheckpointTensor::Kind::router_bias;
    moments += t.kind == CheckpointTensor::Kind::moment;
  }
  EXPECT_EQ(biases, 1u);
  EXPECT_EQ(moments, 2 * whole_model_table(m.model).entries().size());
  for (size_t drop : {size_t(0), size_t(2), m.tensors.size() - 1}) {
    Manifest short_one = m;
    const std::string name = short_one.tensors[drop].name;
    short_one.tensors.erase(short_one.tensors.begin() + std::ptrdiff_t(drop));
    const std::string msg =
        test_util::refusal_of([&] { check_manifest_contents(short_one, "ck/manifest.json"); });
    EXPECT_NE(msg.find("lists no tensor " + name), std::string::npos) << msg;
  }
  Manifest reshaped = m;
  reshaped.tensors[1].shape[0] += 1;
  EXPECT_NE(test_util::refusal_of([&] {
              check_manifest_contents(reshaped, "ck/manifest.json");
            }).find(reshaped.tensors[1].name),
            std::string::npos);
}

// A NaN written into a tensor and the checksum taken after: verify names the tensor and
// element, as the load refuses the value.
TEST(CheckpointVerify, RefusesANonFiniteValueBehindAMatchingChecksum) {
  TempDir dir;
  TinyModel tiny;
  tiny.save(dir / "nan", 2);
  const std::string path = dir / "nan/optimizer.safetensors";
  uint64_t at = 0;
  {
    const SafetensorsFile f(path);
    const SafetensorsFile::Entry& e = f.tensor("transformer.wte.weight.exp_avg");
    std::ifstream in(path, std::ios::binary);
    uint64_t header = 0;
    in.read(reinterpret_cast<char*>(&header), 8);  // little-endian, as the host
    at = 8 + header + e.begin + 3 * sizeof(float);
  }
  {
    std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
    const float nan = std::nanf("");
    out.seekp(std::streamoff(at));
    out.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  }
  reseal(dir / "nan", "optimizer.safetensors");
  EXPECT_THROW(tiny.load(dir / "nan"), UsageError);
  const std::string msg = test_util::refusal_of([&] { verify_checkpoint(dir / "nan"); });
  EXPECT_NE(msg.find("tensor transformer.wte.weight.exp_avg holds NaN or Inf values (element 3)"),
            std::string::npos)
      << msg;
}

// The scan finds the first non-finite value wherever the reads split the bytes.
TEST(NonFiniteScan, FindsTheFirstNonFiniteValueAcrossAnySplit) {
  const uint64_t first = 10;  // a header before the values
  std::string file(first, 'h');
  const float values[] = {1.f, -2.f, 0.f, INFINITY, 3.f, NAN};
  file.append(reinterpret_cast<const char*>(values), sizeof values);
  for (size_t piece : {size_t(1), size_t(3), size_t(5), size_t(7), file.size()}) {
    NonFiniteScan scan(first);
    for (size_t at = 0; at < file.size(); at += piece)
      scan.feed(file.data() + at, std::min(piece, file.size() - at), at);
    ASSERT_TRUE(scan.found().has_value()) << piece;
    EXPECT_EQ(*scan.found(), first + 3 * sizeof(float)) << piece;
  }
  NonFiniteScan finite(first);
  finite.feed(file.data(), first + 3 * sizeof(float), 0);
  EXPECT_FALSE(finite.found().has_value());
}

// A sealed state.json recording a model far beyond any run's limits is refused before the
// expected tensors are listed from it (a crafted "layers" must not size anything).
TEST(CheckpointVerify, ARecordedShapeBeyondTheLimitsIsRefusedFirst) {
  TempDir dir;
  TinyModel tiny;
  tiny.save(dir / "huge", 1);
  nlohmann::json state = nlohmann::json::parse(std::ifstream(dir / "huge/state.json"));
  state.erase(kChecksumKey);
  state["model"]["layers"] = "2000000000";
  seal_json(state);
  std::ofstream(dir / "huge/state.json") << state.dump(2) << "\n";
  const std::string msg = test_util::refusal_of([&] { verify_checkpoint(dir / "huge"); });
  EXPECT_NE(msg.find("\"layers\" is \"2000000000\", not an integer in 0..4096"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace mt
