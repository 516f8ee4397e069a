// One split (train or val) of a dataset as it is written: tokens stream into llm.c shards
// (data/token_shard.h; version 1 whenever the tokenizer's ids fit uint16, else version 2) of
// at most `shard_tokens` each (NAME_000000.bin, NAME_000001.bin, ...) through a buffer of 1 Mi
// tokens, so memory stays small whatever the corpus or shard size, and every document's place is
// appended to NAME.docs: two little-endian uint64 per document, the offset of its first token in
// the split (counted over all its shards) and its token count, the end-of-document tokens not
// included. The trainer reads the shards as one stream; the index lets a reader cut the
// stream back into the exact documents.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace mt {

class SplitWriter {
 public:
  // vocab: the tokenizer's vocabulary, which decides the shards' version.
  SplitWriter(std::string dir, std::string name, int64_t shard_tokens, int64_t vocab);
  ~SplitWriter();
  SplitWriter(const SplitWriter&) = delete;
  SplitWriter& operator=(const SplitWriter&) = delete;

  // content: the document's ids; end: the ids that mark its end; bytes: the text length
  // both stand for (for bytes per token).
  void add_document(std::span<const int> content, std::span<const int> end, uint64_t bytes);
  // Text the split's documents stand for, when add_document was given 0 (a copied split).
  void count_bytes(uint64_t bytes) { bytes_ += bytes; }
  // Writes the last partial shard and closes the index.
  void finish();

  const std::vector<std::string>& shards() const { return shards_; }  // file names
  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return documents_; }
  uint64_t bytes() const { return bytes_; }

 private:
  void append(std::span<const int> ids);
  void open_shard();
  void write_buffer();
  void close_shard();

  std::string dir_, name_;
  int64_t shard_tokens_;
  int64_t vocab_;
  int32_t version_;
  std::vector<uint32_t> buffer_;  // tokens not yet written to the open shard
  std::vector<uint16_t> narrow_;  // a version-1 buffer as written
  std::FILE* shard_ = nullptr;    // the shard being written
  std::string shard_path_;
  int64_t in_shard_ = 0;  // tokens in it so far
  std::vector<std::string> shards_;
  std::FILE* docs_ = nullptr;
  int64_t tokens_ = 0, documents_ = 0;
  uint64_t bytes_ = 0;
};

// The documents of a split read back through its index: each document's ids, in order.
// For tests and checks; holds the split in memory.
std::vector<std::vector<int>> read_split_documents(const std::string& dir,
                                                   const std::vector<std::string>& shards,
                                                   const std::string& docs_file);

}  // namespace mt
