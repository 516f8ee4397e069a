// Vocabularies above 65,536 through the binary: version-2 token shards (docs/contracts.md §10)
// train, the vocabulary is taken from them, and an id outside the vocabulary is one line
// naming the file and the first such id, exit 2, before any rank starts.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli_fixture.h"

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_meshtrain;
using testing::slurp;
using testing::TempDir;

const char* kTiny = " --layers 1 --dim 16 --heads 4 --seq 8 --batch 2 --steps 2 --quiet ";

// Ids spread over 0..top, the last one top: a version-2 shard when top > 65535.
std::string write_spread(const TempDir& dir, const std::string& name, int top, int ntok = 400) {
  std::vector<int> tokens(static_cast<size_t>(ntok));
  for (int i = 0; i < ntok; ++i) tokens[size_t(i)] = int(int64_t(i) * 7919 % (int64_t(top) + 1));
  tokens.back() = top;
  const std::string path = dir / name;
  write_token_shard(path, tokens);
  return path;
}

nlohmann::json run_record(const std::string& metrics) {
  std::istringstream in(slurp(metrics));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "run") return j;
  }
  return {};
}

TEST(LargeVocab, TrainsOnAVersion2ShardAndTakesItsVocabulary) {
  TempDir dir;
  const std::string data = write_spread(dir, "v2.bin", 100000);
  ASSERT_EQ(TokenShard(data).version(), 2);
  const auto r = run_meshtrain(std::string("train") + kTiny + "--data " + data + " --metrics " +
                               (dir / "m.jsonl"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(run_record(dir / "m.jsonl")["model"]["vocab"], "100001");
}

TEST(LargeVocab, VocabularyParallelAt128257OnByteData) {
  Fixture f;
  const auto r = run_meshtrain(std::string("train") + kTiny + "--data " + f.data +
                               " --vocab 128257 --tp 4 --sequence-parallel");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(LargeVocab, IdOutsideTheVocabularyNamesFileAndFirstId) {
  TempDir dir;
  std::vector<int> tokens(400, 5);
  tokens[123] = 70000;
  tokens[300] = 99999;  // larger, but not the first
  const std::string data = dir / "bad.bin";
  write_token_shard(data, tokens);
  expect_usage_error(
      run_meshtrain(std::string("train") + kTiny + "--data " + data + " --vocab 65536"),
      "--data " + data +
          " holds token id 70000 (token 123, the first id outside the vocabulary) but the model "
          "vocab is 65536");
  tokens.assign(400, 7);
  tokens[399] = 128256;
  const std::string val = dir / "val.bin";
  write_token_shard(val, tokens);
  expect_usage_error(run_meshtrain(std::string("train") + kTiny + "--data " + data +
                                   " --vocab 100000 --val-data " + val + " --eval-every 1"),
                     "--val-data " + val + " holds token id 128256 (token 399,");
}

// A model of more rows than its tokenizer has pieces (--vocab above a dataset's): the end-of-
// run sample and `meshtrain sample` draw only ids the tokenizer can decode. An untrained
// model puts nearly all its mass on the 69,700 rows past the 300 pieces, so without the
// limit the first id drawn would be one the tokenizer cannot decode (exit 2 mid-text).
TEST(LargeVocab, SamplesOnlyIdsTheTokenizerKnows) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 60; ++i)
    text += "the quick brown fox " + std::to_string(i) + " jumps over the lazy dog\n%\n";
  std::ofstream(dir / "t.txt") << text;
  auto r = run_meshtrain("prepare " + (dir / "t.txt") + " --out " + (dir / "ds") +
                         " --documents separator --tokenizer bpe --vocab-size 300 "
                         "--val-fraction 0 --quiet");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Not --quiet: the end-of-run sample is printed with the progress.
  r = run_meshtrain("train --layers 1 --dim 16 --heads 4 --seq 8 --batch 2 --steps 1 --data " +
                    (dir / "ds") + " --vocab 70000 --sample-tokens 30 --export " +
                    (dir / "m.safetensors"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("---- sample (30 tokens, bpe tokenizer"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("error"), std::string::npos) << r.err;
  r = run_meshtrain("sample --init-from " + (dir / "m.safetensors") + " --tokens 30");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

}  // namespace
}  // namespace mt
