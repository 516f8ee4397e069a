#include "data/shard_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/input_file.h"
#include "data/token_shard.h"

namespace mt {

namespace {

// Tokens buffered before they go to the shard file: memory stays this small whatever
// --shard-tokens is.
constexpr size_t kChunkTokens = size_t(1) << 20;

std::string shard_name(const std::string& name, size_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "_%06zu.bin", index);
  return name + buf;
}

void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes && std::fwrite(data, 1, bytes, f) != bytes)
    throw RuntimeError(str("cannot write ", path, ": ", std::strerror(errno)));
}

}  // namespace

SplitWriter::SplitWriter(std::string dir, std::string name, int64_t shard_tokens, int64_t vocab)
    : dir_(std::move(dir)),
      name_(std::move(name)),
      shard_tokens_(shard_tokens),
      vocab_(vocab),
      version_(token_shard_version_for_vocab(vocab)) {
  MT_REQUIRE(shard_tokens > 0 && shard_tokens <= INT32_MAX, "--shard-tokens ", shard_tokens,
             " must be between 1 and 2^31-1 (the shard header's int32)");
  const std::string path = dir_ + "/" + name_ + ".docs";
  docs_ = std::fopen(path.c_str(), "wb");
  if (!docs_) throw RuntimeError(str("cannot create ", path, ": ", std::strerror(errno)));
}

SplitWriter::~SplitWriter() {
  if (docs_) std::fclose(docs_);
  if (shard_) std::fclose(shard_);  // an unfinished split: its directory is discarded
}

void SplitWriter::append(std::span<const int> ids) {
  for (int id : ids) {
    MT_CHECK(id >= 0 && id < vocab_, "token id ", id, " outside the tokenizer's ", vocab_);
    if (!shard_) open_shard();
    buffer_.push_back(uint32_t(id));
    ++in_shard_;
    if (buffer_.size() == kChunkTokens) write_buffer();
    if (in_shard_ == shard_tokens_) close_shard();
  }
}

void SplitWriter::add_document(std::span<const int> content, std::span<const int> end,
                               uint64_t bytes) {
  const uint64_t entry[2] = {uint64_t(tokens_), uint64_t(content.size())};
  write_all(docs_, entry, sizeof entry, name_ + ".docs");
  append(content);
  append(end);
  tokens_ += int64_t(content.size() + end.size());
  bytes_ += bytes;
  ++documents_;
}

// Plain writes: the whole dataset directory is fsynced and published at once
// (core/atomic_file.h, publish_dir_atomic). The header's token count is known when the
// shard closes, so a zero header goes first and is overwritten then.
void SplitWriter::open_shard() {
  shard_path_ = dir_ + "/" + shard_name(name_, shards_.size());
  shard_ = std::fopen(shard_path_.c_str(), "wb");
  if (!shard_) throw RuntimeError(str("cannot create ", shard_path_, ": ", std::strerror(errno)));
  const std::vector<int32_t> zeros(kTokenShardHeaderInts, 0);
  write_all(shard_, zeros.data(), kTokenShardHeaderBytes, shard_path_);
  in_shard_ = 0;
}

void SplitWriter::write_buffer() {
  if (version_ == kTokenShardVersion32) {
    write_all(shard_, buffer_.data(), buffer_.size() * sizeof(uint32_t), shard_path_);
  } else {
    narrow_.assign(buffer_.begin(), buffer_.end());  // ids < vocab <= 65536: exact
    write_all(shard_, narrow_.data(), narrow_.size() * sizeof(uint16_t), shard_path_);
  }
  buffer_.clear();
}

void SplitWriter::close_shard() {
  write_buffer();
  std::vector<int32_t> header(kTokenShardHeaderInts, 0);
  header[0] = kTokenShardMagic;
  header[1] = version_;
  header[2] = int32_t(in_shard_);
  if (std::fseek(shard_, 0, SEEK_SET) != 0)
    throw RuntimeError(str("cannot write ", shard_path_, ": ", std::strerror(errno)));
  write_all(shard_, header.data(), kTokenShardHeaderBytes, shard_path_);
  const int rc = std::fclose(shard_);
  shard_ = nullptr;
  if (rc != 0) throw RuntimeError(str("cannot write ", shard_path_, ": ", std::strerror(errno)));
  shards_.push_back(std::filesystem::path(shard_path_).filename().string());
}

void SplitWriter::finish() {
  if (!shard_ && shards_.empty()) open_shard();  // an empty split still has its shard
  if (shard_) close_shard();
  if (docs_) {
    const int rc = std::fclose(docs_);
    docs_ = nullptr;
    if (rc != 0) throw RuntimeError(str("cannot write ", name_, ".docs: ", std::strerror(errno)));
  }
}

std::vector<std::vector<int>> read_split_documents(const std::string& dir,
                                                   const std::vector<std::string>& shards,
                                                   const std::string& docs_file) {
  std::vector<uint32_t> all;
  for (const std::string& s : shards) {
    std::vector<uint32_t> t = read_token_shard(dir + "/" + s);
    all.insert(all.end(), t.begin(), t.end());
  }
  const std::string index =
      read_input_file("document index", dir + "/" + docs_file, kStreamedInputBytes);
  std::vector<std::vector<int>> docs;
  uint64_t entry[2];
  for (size_t at = 0; at + sizeof entry <= index.size(); at += sizeof entry) {
    std::memcpy(entry, index.data() + at, sizeof entry);
    MT_REQUIRE(entry[0] <= all.size() && entry[1] <= all.size() - entry[0], dir, "/", docs_file,
               " names tokens beyond its shards");
    docs.emplace_back(all.begin() + int64_t(entry[0]), all.begin() + int64_t(entry[0] + entry[1]));
  }
  return docs;
}

}  // namespace mt
