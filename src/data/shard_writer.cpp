#include "data/shard_writer.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "data/token_shard.h"

namespace mt {

namespace {

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

SplitWriter::SplitWriter(std::string dir, std::string name, int64_t shard_tokens)
    : dir_(std::move(dir)), name_(std::move(name)), shard_tokens_(shard_tokens) {
  MT_REQUIRE(shard_tokens > 0 && shard_tokens <= INT32_MAX, "--shard-tokens ", shard_tokens,
             " must be between 1 and 2^31-1 (the shard header's int32)");
  const std::string path = dir_ + "/" + name_ + ".docs";
  docs_ = std::fopen(path.c_str(), "wb");
  if (!docs_) throw RuntimeError(str("cannot create ", path, ": ", std::strerror(errno)));
}

SplitWriter::~SplitWriter() {
  if (docs_) std::fclose(docs_);
}

void SplitWriter::append(std::span<const int> ids) {
  for (int id : ids) {
    MT_CHECK(id >= 0 && id <= 65535, "token id ", id, " does not fit a uint16 shard");
    buffer_.push_back(uint16_t(id));
    if (int64_t(buffer_.size()) == shard_tokens_) flush_shard();
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

void SplitWriter::flush_shard() {
  // Plain writes: the whole dataset directory is fsynced and published at once
  // (core/atomic_file.h, publish_dir_atomic).
  const std::string name = shard_name(name_, shards_.size());
  const std::string path = dir_ + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw RuntimeError(str("cannot create ", path, ": ", std::strerror(errno)));
  std::vector<int32_t> header(kTokenShardHeaderInts, 0);
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = int32_t(buffer_.size());
  try {
    write_all(f, header.data(), kTokenShardHeaderBytes, path);
    write_all(f, buffer_.data(), buffer_.size() * sizeof(uint16_t), path);
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0)
    throw RuntimeError(str("cannot write ", path, ": ", std::strerror(errno)));
  shards_.push_back(name);
  buffer_.clear();
}

void SplitWriter::finish() {
  if (!buffer_.empty() || shards_.empty()) flush_shard();
  if (docs_) {
    const int rc = std::fclose(docs_);
    docs_ = nullptr;
    if (rc != 0) throw RuntimeError(str("cannot write ", name_, ".docs: ", std::strerror(errno)));
  }
}

std::vector<std::vector<int>> read_split_documents(const std::string& dir,
                                                   const std::vector<std::string>& shards,
                                                   const std::string& docs_file) {
  std::vector<uint16_t> all;
  for (const std::string& s : shards) {
    std::vector<uint16_t> t = read_token_shard(dir + "/" + s);
    all.insert(all.end(), t.begin(), t.end());
  }
  std::ifstream in(dir + "/" + docs_file, std::ios::binary);
  MT_REQUIRE(in, "cannot read ", dir, "/", docs_file);
  std::vector<std::vector<int>> docs;
  uint64_t entry[2];
  while (in.read(reinterpret_cast<char*>(entry), sizeof entry)) {
    MT_REQUIRE(entry[0] + entry[1] <= all.size(), dir, "/", docs_file,
               " names tokens beyond its shards");
    docs.emplace_back(all.begin() + int64_t(entry[0]), all.begin() + int64_t(entry[0] + entry[1]));
  }
  return docs;
}

}  // namespace mt
