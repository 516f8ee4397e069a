// Corpora for the prepare tests, built at run time from lists of documents so the expected
// documents are known exactly: ASCII, multi-byte UTF-8, invalid UTF-8, SentencePiece's own
// space marker, empty documents.
#pragma once

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/prepare.h"
#include "data/shard_writer.h"
#include "test_util/temp_dir.h"

namespace mt::test_data {

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Documents that every rule can hold: all but the last end in '\n' and none holds a blank
// line or a line "%". `empty` adds an empty document (not for the blank rule).
inline std::vector<std::string> awkward_documents(bool empty) {
  std::vector<std::string> d = {
      "Plain ASCII text.\nA second line, with  two spaces and\ta tab.\n",
      "Multi-byte UTF-8: w\xC3\xB6rld, \xE2\x82\xAC 5, \xF0\x9F\x98\x80, "
      "\xE6\x97\xA5\xE6\x9C\xAC\n",
      "Invalid UTF-8: \xFF\xFE, a lone \x80, truncated \xE2\x82, overlong \xC0\xAF, surrogate "
      "\xED\xA0\x80\n",
      "SentencePiece's marker \xE2\x96\x81 literally, then \xE2\x96\x81\xE2\x96\x81 twice\n",
      "Windows line\r\nends\r\n",
  };
  if (empty) d.insert(d.begin() + 2, "");
  for (int i = 0; i < 40; ++i)
    d.push_back("Document " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog " +
                std::string(size_t(i % 7), '!') + "\n");
  d.push_back("The last one has no final newline");
  return d;
}

// The input text (or files) holding `docs` under `rule`; returns the inputs to prepare.
inline std::vector<std::string> write_corpus(const test_util::TempDir& dir,
                                             const std::vector<std::string>& docs,
                                             const std::string& rule) {
  if (rule == "file") {
    std::filesystem::create_directories(dir / "corpus");
    for (size_t i = 0; i < docs.size(); ++i) {
      char name[48];
      std::snprintf(name, sizeof name, "corpus/doc_%04zu.txt", i);
      write_file(dir / name, docs[i]);
    }
    write_file(dir / "corpus/.hidden", "not a document\n");
    return {dir / "corpus"};
  }
  std::string text;
  for (size_t i = 0; i < docs.size(); ++i) {
    text += docs[i];
    if (i + 1 < docs.size()) text += rule == "separator" ? "%\n" : "\n";
  }
  write_file(dir / "corpus.txt", text);
  return {dir / "corpus.txt"};
}

// A SentencePiece model of more pieces than a uint16 shard can index: `base` (a serialized
// ModelProto of meshtrain prepare) with `extra` normal pieces "zq00000", "zq00001", ...
// appended. A repeated protobuf field may occur anywhere in a message and its occurrences
// concatenate, so the new pieces take ids base_size .. base_size + extra - 1. Score 0 beats
// every trained piece's log probability, so the text "zq12345" encodes to its own piece.
inline std::string with_extra_pieces(std::string base, int extra) {
  auto varint = [](std::string& out, uint64_t v) {
    for (; v >= 0x80; v >>= 7) out += char(0x80 | (v & 0x7F));
    out += char(v);
  };
  for (int i = 0; i < extra; ++i) {
    char text[16];
    std::snprintf(text, sizeof text, "zq%05d", i);
    std::string piece;
    piece += char(0x0A);  // SentencePiece.piece, length-delimited
    varint(piece, std::strlen(text));
    piece += text;
    piece += char(0x15);    // SentencePiece.score, 32-bit
    piece.append(4, '\0');  // 0.0f
    base += char(0x0A);     // ModelProto.pieces, length-delimited
    varint(base, piece.size());
    base += piece;
  }
  return base;
}

// The documents of a dataset's split, decoded.
inline std::vector<std::string> decoded_documents(const DatasetSplit& s, const Tokenizer& tok) {
  std::vector<std::string> out;
  if (s.shards.empty()) return out;
  const std::string dir = std::filesystem::path(s.docs).parent_path().string();
  std::vector<std::string> names;
  for (const std::string& p : s.shards) names.push_back(std::filesystem::path(p).filename());
  for (const auto& ids : read_split_documents(dir, names, std::filesystem::path(s.docs).filename()))
    out.push_back(tok.decode(ids));
  return out;
}

}  // namespace mt::test_data
