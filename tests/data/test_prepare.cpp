#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/document_shuffle.h"
#include "data/prepare.h"
#include "data/token_shard.h"
#include "prepare_fixture.h"

namespace mt {
namespace {

using test_data::awkward_documents;
using test_data::decoded_documents;
using test_data::write_corpus;
using test_util::TempDir;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// The documents of a split in the order prepare writes them: input order, or with
// shuffling the seeded order of data/document_shuffle.h.
std::vector<std::string> in_written_order(const std::vector<std::string>& docs,
                                          const PrepareOptions& o, const std::string& split) {
  if (!o.shuffle) return docs;
  std::vector<std::string> out;
  for (uint64_t i : document_order(o.shuffle_seed, split, int64_t(docs.size())))
    out.push_back(docs[i]);
  return out;
}

// Prepares `docs` under `rule` and checks that train and val decode to exactly the
// documents the seeded split assigns them, in the seeded document order (or input order).
Dataset expect_round_trip(const TempDir& dir, const std::vector<std::string>& docs,
                          const std::string& rule, PrepareOptions o) {
  o.inputs = write_corpus(dir, docs, rule);
  o.out = dir / "ds";
  o.documents = rule;
  const Dataset d = prepare_dataset(o);
  std::vector<std::string> want_train, want_val;
  for (size_t i = 0; i < docs.size(); ++i)
    (is_validation_document(i, o.seed, o.val_fraction) ? want_val : want_train).push_back(docs[i]);
  want_train = in_written_order(want_train, o, "train");
  want_val = in_written_order(want_val, o, "val");
  auto tok = load_tokenizer(d.tokenizer);
  EXPECT_EQ(decoded_documents(d.train, *tok), want_train) << rule << " " << o.tokenizer;
  EXPECT_EQ(decoded_documents(d.val, *tok), want_val) << rule << " " << o.tokenizer;
  EXPECT_EQ(d.train.documents, int64_t(want_train.size()));
  // The split streams are the documents each followed by the end marker.
  const std::string marker = rule == "separator" ? "%\n" : "\n";
  std::string stream;
  for (const std::string& s : want_train) stream += s + marker;
  std::vector<int> all;
  for (const std::string& p : d.train.shards)
    for (uint32_t t : read_token_shard(p)) all.push_back(int(t));
  EXPECT_EQ(tok->decode(all), stream);
  EXPECT_EQ(d.train.bytes, stream.size());
  return d;
}

TEST(Prepare, ByteLevelRoundTripsEveryRule) {
  PrepareOptions o;
  o.val_fraction = 0.2;
  o.shard_tokens = 97;  // many shards, documents across shard boundaries
  for (const std::string rule : {"file", "separator", "blank"}) {
    TempDir dir;
    const Dataset d = expect_round_trip(dir, awkward_documents(rule != "blank"), rule, o);
    EXPECT_GT(d.train.shards.size(), 5u);
    EXPECT_EQ(d.tokenizer.kind, "byte");
  }
}

// Documents are shuffled by --shuffle-seed (a pure function of it: the same seed, the same
// bytes; another seed, another order), recorded in the manifest; --no-shuffle keeps input
// order (issue #31: 419 files in path order made 200 steps see only the first 90).
TEST(Prepare, ShuffleSeedOrdersDocumentsAndNoShuffleKeepsInputOrder) {
  const std::vector<std::string> docs = awkward_documents(true);
  PrepareOptions o;
  o.val_fraction = 0.2;
  o.shard_tokens = 97;
  auto prepared = [&](const TempDir& dir, const PrepareOptions& opts) {
    const Dataset d = expect_round_trip(dir, docs, "file", opts);
    auto tok = load_tokenizer(d.tokenizer);
    const nlohmann::json m = nlohmann::json::parse(read_bytes(d.dir + "/manifest.json"));
    return std::pair{decoded_documents(d.train, *tok), m["shuffle_seed"]};
  };
  TempDir a, b, c, in_order;
  const auto [first, seed_a] = prepared(a, o);
  EXPECT_EQ(seed_a, 1337);
  EXPECT_EQ(prepared(b, o).first, first);  // deterministic
  PrepareOptions other = o;
  other.shuffle_seed = 7;
  EXPECT_NE(prepared(c, other).first, first);
  PrepareOptions none = o;
  none.shuffle = false;
  const auto [kept, seed_none] = prepared(in_order, none);
  EXPECT_TRUE(seed_none.is_null());
  EXPECT_NE(kept, first);  // shuffling moved documents
  std::vector<std::string> sorted_first = first, sorted_kept = kept;
  std::sort(sorted_first.begin(), sorted_first.end());
  std::sort(sorted_kept.begin(), sorted_kept.end());
  EXPECT_EQ(sorted_first, sorted_kept);  // the same documents
  for (const auto& entry : std::filesystem::directory_iterator(a / "ds"))
    EXPECT_EQ(entry.path().filename().string().find("in-order"), std::string::npos)
        << "the input-order split was left behind: " << entry.path();
}

TEST(Prepare, BpeRoundTripsInvalidUtf8AndEmptyDocuments) {
  PrepareOptions o;
  o.tokenizer = "bpe";
  o.vocab_size = 600;
  o.val_fraction = 0.25;
  o.shard_tokens = 200;
  TempDir dir;
  const Dataset d = expect_round_trip(dir, awkward_documents(true), "separator", o);
  EXPECT_EQ(d.tokenizer.kind, "bpe");
  auto tok = load_tokenizer(d.tokenizer);
  EXPECT_GT(tok->vocab_size(), 259);
  EXPECT_LE(tok->vocab_size(), 600);
  // Subwords, not bytes: the English documents take fewer tokens than bytes.
  EXPECT_GT(d.train.bytes_per_token(), 1.5);
}

TEST(Prepare, UnigramRoundTrips) {
  PrepareOptions o;
  o.tokenizer = "unigram";
  o.vocab_size = 320;
  TempDir dir;
  expect_round_trip(dir, awkward_documents(true), "file", o);
}

TEST(Prepare, GivenModelIsCopiedAndRecorded) {
  TempDir dir;
  PrepareOptions o;
  o.inputs = write_corpus(dir, awkward_documents(false), "blank");
  o.documents = "blank";
  o.tokenizer = "unigram";
  o.vocab_size = 340;
  o.out = dir / "first";
  const Dataset a = prepare_dataset(o);
  o.tokenizer = a.tokenizer.file;
  o.out = dir / "second";
  const Dataset b = prepare_dataset(o);
  EXPECT_EQ(b.tokenizer.kind, "unigram");
  EXPECT_EQ(b.tokenizer.crc32c, a.tokenizer.crc32c);
  EXPECT_NE(b.tokenizer.file, a.tokenizer.file);  // the dataset holds its own copy
  EXPECT_EQ(read_bytes(a.train.shards[0]), read_bytes(b.train.shards[0]));
}

// docs/contracts.md §10: version 1 whenever the tokenizer's ids fit uint16, so every dataset of
// a vocabulary up to 65,536 reads as before, in half the bytes.
TEST(Prepare, ShardsAreVersion1WhenTheVocabularyFits) {
  TempDir dir;
  PrepareOptions o;
  o.inputs = write_corpus(dir, awkward_documents(false), "blank");
  o.documents = "blank";
  o.val_fraction = 0.2;
  o.out = dir / "bytes";
  for (const std::string& p : prepare_dataset(o).train.shards)
    EXPECT_EQ(TokenShard(p).version(), 1) << p;
  // Asked for 70,000 pieces, SentencePiece makes as many as this small text holds: the
  // tokenizer's vocabulary decides, not the request.
  o.tokenizer = "bpe";
  o.vocab_size = 70000;
  o.out = dir / "bpe";
  const Dataset d = prepare_dataset(o);
  ASSERT_LE(load_tokenizer(d.tokenizer)->vocab_size(), 65536);
  for (const DatasetSplit* s : {&d.train, &d.val})
    for (const std::string& p : s->shards) EXPECT_EQ(TokenShard(p).version(), 1) << p;
}

// A tokenizer of more than 65,536 pieces gets version-2 shards that round-trip its ids,
// those above 65535 included.
TEST(Prepare, LargeVocabularyWritesVersion2Shards) {
  TempDir dir;
  PrepareOptions o;
  o.inputs = write_corpus(dir, awkward_documents(false), "blank");
  o.documents = "blank";
  o.tokenizer = "unigram";
  o.vocab_size = 320;
  o.out = dir / "small";
  const Dataset small = prepare_dataset(o);
  const int base = load_tokenizer(small.tokenizer)->vocab_size();
  test_data::write_file(dir / "large.model",
                        test_data::with_extra_pieces(read_bytes(small.tokenizer.file), 70000));
  std::vector<std::string> docs = awkward_documents(false);
  docs.insert(docs.begin() + 1, "rare pieces zq69999 and zq00000 and zq65535\n");
  o = {};
  o.tokenizer = dir / "large.model";
  o.val_fraction = 0;
  o.shard_tokens = 300;  // several shards
  const Dataset d = expect_round_trip(dir, docs, "blank", o);
  const auto tok = load_tokenizer(d.tokenizer);
  ASSERT_EQ(tok->vocab_size(), base + 70000);
  EXPECT_EQ(tok->encode("zq69999"), std::vector<int>{base + 69999});
  int64_t max_id = -1;
  for (const std::string& p : d.train.shards) {
    EXPECT_EQ(TokenShard(p).version(), 2) << p;
    max_id = std::max(max_id, TokenShard(p).max_token_id());
  }
  EXPECT_EQ(max_id, base + 69999);
  const nlohmann::json m = nlohmann::json::parse(read_bytes(d.dir + "/manifest.json"));
  EXPECT_EQ(m["vocab_size"], base + 70000);
}

TEST(Prepare, OutputDoesNotDependOnTheThreadCount) {
  TempDir dir;
  PrepareOptions o;
  std::vector<std::string> docs;
  for (int k = 0; k < 4; ++k)
    for (const std::string& d : awkward_documents(true)) docs.push_back(d);
  o.encode_batch_bytes = 2000;  // several batches of this small corpus
  o.inputs = write_corpus(dir, docs, "separator");
  o.documents = "separator";
  o.tokenizer = "bpe";
  o.vocab_size = 400;
  o.threads = 1;
  o.out = dir / "one";
  const Dataset one = prepare_dataset(o);
  o.tokenizer = one.tokenizer.file;
  o.threads = 3;
  o.out = dir / "three";
  const Dataset three = prepare_dataset(o);
  ASSERT_EQ(one.train.shards.size(), three.train.shards.size());
  for (size_t i = 0; i < one.train.shards.size(); ++i)
    EXPECT_EQ(read_bytes(one.train.shards[i]), read_bytes(three.train.shards[i]));
  EXPECT_EQ(read_bytes(one.val.shards[0]), read_bytes(three.val.shards[0]));
  EXPECT_EQ(read_bytes(one.train.docs), read_bytes(three.train.docs));
}

TEST(Prepare, SplitIsDeterministicAndFollowsTheSeed) {
  TempDir dir;
  PrepareOptions o;
  o.inputs = write_corpus(dir, awkward_documents(true), "separator");
  o.documents = "separator";
  o.val_fraction = 0.3;
  o.out = dir / "a";
  const Dataset a = prepare_dataset(o);
  o.out = dir / "b";
  const Dataset b = prepare_dataset(o);
  o.seed += 1;
  o.out = dir / "c";
  const Dataset c = prepare_dataset(o);
  EXPECT_EQ(read_bytes(a.train.shards[0]), read_bytes(b.train.shards[0]));
  EXPECT_EQ(read_bytes(a.val.shards[0]), read_bytes(b.val.shards[0]));
  EXPECT_EQ(read_bytes(a.dir + "/manifest.json"), read_bytes(b.dir + "/manifest.json"));
  EXPECT_NE(read_bytes(a.val.shards[0]), read_bytes(c.val.shards[0]));
  // About the fraction asked for (46 documents: 0.3 is 14).
  EXPECT_GE(a.val.documents, 6);
  EXPECT_LE(a.val.documents, 24);
}

TEST(Prepare, BadInputIsRefusedAndNothingIsWritten) {
  TempDir dir;
  test_data::write_file(dir / "text.txt", "some text\n");
  test_data::write_file(dir / "binary.bin", std::string("\x7f"
                                                        "ELF\0\0\0",
                                                        7));
  test_data::write_file(dir / "empty.txt", "");
  test_data::write_file(dir / "late_nul.txt", std::string(70000, 'a') + '\0' + "tail\n");
  std::filesystem::create_directories(dir / "not_a_dataset");
  test_data::write_file(dir / "not_a_dataset/keep.txt", "mine\n");
  auto refuses = [&](PrepareOptions o, const std::string& says) {
    if (o.out.empty()) o.out = dir / "out";
    if (o.inputs.empty()) o.inputs = {dir / "text.txt"};
    o.val_fraction = 0;
    try {
      prepare_dataset(o);
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  };
  PrepareOptions o;
  o.inputs = {dir / "binary.bin"};
  refuses(o, "NUL byte at offset 4");
  o.inputs = {dir / "late_nul.txt"};  // past the probe: found while streaming
  refuses(o, "NUL byte at offset 70000");
  o.inputs = {dir / "nosuch.txt"};
  refuses(o, "does not exist");
  o.inputs = {dir / "empty.txt"};
  refuses(o, "the corpus is empty");
  o.inputs = {};
  o.tokenizer = "bpe";
  o.vocab_size = 100;
  refuses(o, "too small");
  o.tokenizer = dir / "text.txt";  // not a SentencePiece model
  refuses(o, "is not a SentencePiece model (its bytes do not parse as one)");
  o = {};
  o.out = dir / "not_a_dataset";
  refuses(o, "not a dataset");
  EXPECT_TRUE(std::filesystem::exists(dir / "not_a_dataset/keep.txt"));
  if (::geteuid() != 0) {  // root reads everything
    test_data::write_file(dir / "locked.txt", "x\n");
    std::filesystem::permissions(dir / "locked.txt", std::filesystem::perms::none);
    o = {};
    o.inputs = {dir / "locked.txt"};
    refuses(o, "is not readable");
  }
}

TEST(Prepare, ReplacesAnEarlierDatasetAtomically) {
  TempDir dir;
  test_data::write_file(dir / "one.txt", "first version\n");
  PrepareOptions o;
  o.inputs = {dir / "one.txt"};
  o.val_fraction = 0;
  o.out = dir / "new/parents/ds";  // created
  prepare_dataset(o);
  test_data::write_file(dir / "one.txt", "second\n");
  const Dataset d = prepare_dataset(o);
  EXPECT_EQ(d.train.tokens, 8);
  // A failing run leaves the previous dataset as it was.
  test_data::write_file(dir / "one.txt", "");
  EXPECT_THROW(prepare_dataset(o), UsageError);
  EXPECT_EQ(read_dataset(o.out).train.tokens, 8);
}

// SentencePiece's status text is its own assertion ("./src/trainer_interface.cc(580)
// [(static_cast<int>(required_chars_.size() ..."); the user needs what is wrong and the fix.
TEST(Prepare, SentencePieceFailuresAreSaidInOurWords) {
  TempDir dir;
  std::string text;  // 1500 distinct three-byte characters: more than 300 pieces can hold
  for (int line = 0; line < 200; ++line) {
    for (int i = 0; i < 60; ++i) {
      const int c = 0x4E00 + (line * 61 + i * 7) % 1500;
      text += char(0xE0 | (c >> 12));
      text += char(0x80 | ((c >> 6) & 0x3F));
      text += char(0x80 | (c & 0x3F));
    }
    text += "\n";
  }
  test_data::write_file(dir / "cjk.txt", text);
  PrepareOptions o;
  o.inputs = {dir / "cjk.txt"};
  o.out = dir / "ds";
  o.tokenizer = "bpe";
  o.vocab_size = 300;
  try {
    prepare_dataset(o);
    ADD_FAILURE() << "a 300-piece model of 1500 characters was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--vocab-size 300 is too small for this text"), std::string::npos) << what;
    EXPECT_NE(what.find("give --vocab-size "), std::string::npos) << what;
    EXPECT_EQ(what.find(".cc("), std::string::npos) << what;
    EXPECT_EQ(what.find("required_chars_"), std::string::npos) << what;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "ds"));
}

// A crafted or damaged manifest is refused by field, in our words, before a shard is read:
// the raw JSON-library text ("[json.exception.type_error.302] ...") told the user nothing.
TEST(Prepare, CraftedManifestsAreRefusedByField) {
  TempDir dir;
  test_data::write_file(dir / "one.txt", "some text\n");
  PrepareOptions o;
  o.inputs = {dir / "one.txt"};
  o.val_fraction = 0;
  o.out = dir / "ds";
  prepare_dataset(o);
  const std::string manifest = read_bytes(dir / "ds/manifest.json");
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{"\"tokens\": 11", "\"tokens\": \"ten\""}, "\"tokens\" is a string, not an integer"},
      {{"\"tokens\": 11", "\"tokens\": -10"}, "\"tokens\" is -10, not an integer >= 0"},
      {{"\"train_000000.bin\"", "\"../../etc/passwd\""}, "is not the name of a file inside"},
      {{"\"shards\": [", "\"shards\": 7, \"x\": ["}, "\"shards\" must be a non-empty array"},
      {{"\"kind\": \"byte\"", "\"kind\": 1"}, "\"kind\" is not a string"},
      {{"\"documents\": \"file\"", "\"documents\": \"lines\""}, "not file, separator or blank"},
  };
  for (const auto& [edit, says] : cases) {
    std::string m = manifest;
    const size_t at = m.find(edit.first);
    ASSERT_NE(at, std::string::npos) << edit.first << " in " << manifest;
    m.replace(at, edit.first.size(), edit.second);
    test_data::write_file(dir / "ds/manifest.json", m);
    try {
      read_dataset(dir / "ds");
      ADD_FAILURE() << "accepted " << edit.second;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace mt
