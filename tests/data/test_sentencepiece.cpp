#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "data/prepare.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/utf8.h"
#include "prepare_fixture.h"

namespace mt {
namespace {

using test_util::TempDir;

TEST(Utf8, SafeRunsStopAtInvalidBytesTheMarkerAndNul) {
  EXPECT_EQ(sentencepiece_safe_run("abc", 0), 3u);
  EXPECT_EQ(sentencepiece_safe_run("w\xC3\xB6rld", 0), 6u);
  EXPECT_EQ(sentencepiece_safe_run("ab\xFF", 0), 2u);
  EXPECT_EQ(sentencepiece_safe_run("ab\xE2\x96\x81z", 0), 2u);  // U+2581
  EXPECT_EQ(sentencepiece_safe_run("ab\xE2\x96\x82z", 0), 6u);  // U+2582 is fine
  EXPECT_EQ(sentencepiece_safe_run(std::string_view("a\0b", 3), 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xC0\xAF", 0), 0u);          // overlong
  EXPECT_EQ(utf8_sequence_length("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(utf8_sequence_length("\xF4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_sequence_length("\xE2\x82", 0), 0u);  // truncated
}

// A model trained by prepare, and the text it must tokenize exactly as the Python binding.
struct TrainedModel {
  TempDir dir;
  std::string model;
  explicit TrainedModel(const std::string& kind) {
    PrepareOptions o;
    o.inputs = test_data::write_corpus(dir, test_data::awkward_documents(false), "blank");
    o.documents = "blank";
    o.tokenizer = kind;
    o.vocab_size = 330;
    o.val_fraction = 0;
    o.out = dir / "ds";
    model = prepare_dataset(o).tokenizer.file;
  }
};

bool python_has_sentencepiece() {
  return std::system("/usr/bin/python3 -c 'import sentencepiece' >/dev/null 2>&1") == 0;
}

std::vector<int> python_ids(const std::string& model, const std::string& text_file) {
  TempDir io;
  const std::string cmd =
      "/usr/bin/python3 -c \"import sys, sentencepiece as s; p = s.SentencePieceProcessor("
      "model_file=sys.argv[1]); t = open(sys.argv[2], encoding='utf-8', newline='').read(); "
      "print(' '.join(map(str, p.encode(t))))\" '" +
      model + "' '" + text_file + "' > " + (io / "ids");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(io / "ids");
  std::vector<int> ids;
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

class SentencePieceKinds : public ::testing::TestWithParam<std::string> {};

TEST_P(SentencePieceKinds, IdsMatchPythonSentencePiece) {
  if (!python_has_sentencepiece())
    GTEST_SKIP() << "python3-sentencepiece is not installed (scripts/setup.sh installs it)";
  TrainedModel m(GetParam());
  // Valid UTF-8 without U+2581: what meshtrain hands SentencePiece whole.
  const std::string text =
      "The quick brown fox jumps over the lazy dog.\n  Two spaces,\ttabs, w\xC3\xB6rld, "
      "\xE2\x82\xAC 5, \xF0\x9F\x98\x80 and \xE6\x97\xA5\xE6\x9C\xAC \xE2\x80\x94 "
      "characters it never saw: \xD0\x96\xD0\xB8\xD0\xB7\xD0\xBD\xD1\x8C.\nDocument 12: the end";
  TempDir dir;
  test_data::write_file(dir / "text.txt", text);
  auto tok = load_sentencepiece_tokenizer(m.model);
  EXPECT_EQ(tok->kind(), GetParam());
  const std::vector<int> ours = tok->encode(text);
  EXPECT_EQ(ours, python_ids(m.model, dir / "text.txt"));
  EXPECT_EQ(tok->decode(ours), text);
  EXPECT_LT(ours.size(), text.size());
}

TEST_P(SentencePieceKinds, RoundTripsAnyBytes) {
  TrainedModel m(GetParam());
  auto tok = load_sentencepiece_tokenizer(m.model);
  std::string all;
  for (int b = 1; b < 256; ++b) all += char(b);
  all += "\xE2\x96\x81 the \xE2\x96\x81\xE2\x96\x81 fox \xFF";
  EXPECT_EQ(tok->decode(tok->encode(all)), all);
  EXPECT_THROW(tok->decode(std::vector<int>{tok->vocab_size()}), UsageError);
}

INSTANTIATE_TEST_SUITE_P(Kinds, SentencePieceKinds, ::testing::Values("bpe", "unigram"));

TEST(Tokenizer, RecordRefusesAChangedFile) {
  TrainedModel m("bpe");
  const TokenizerRecord r = record_tokenizer_file("bpe", m.model);
  EXPECT_NO_THROW(load_tokenizer(r));
  std::ofstream(m.model, std::ios::app) << "x";
  try {
    load_tokenizer(r);
    ADD_FAILURE() << "a changed model was loaded";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("has changed"), std::string::npos) << e.what();
  }
  TokenizerRecord wrong = r;
  wrong.kind = "unigram";
  EXPECT_FALSE(same_tokenizer(r, wrong));
  EXPECT_EQ(tokenizer_record_from_json(to_json(r), "x"), r);
}

}  // namespace
}  // namespace mt
