#include "data/document_shuffle.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/input_file.h"
#include "core/rng.h"
#include "data/sample_index.h"
#include "data/token_shard.h"

namespace mt {

namespace {

// The input-order split's shards as one stream of tokens.
class ShardStream {
 public:
  ShardStream(const std::string& dir, const std::vector<std::string>& shards) {
    for (const std::string& s : shards) {
      shards_.emplace_back(dir + "/" + s);
      starts_.push_back(size_);
      size_ += shards_.back().size();
    }
  }
  int64_t size() const { return size_; }
  void copy(int64_t pos, int64_t n, std::vector<int>& out) const {
    out.resize(size_t(n));
    int32_t* at = out.data();
    size_t k = size_t(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) - 1;
    while (n > 0) {
      const int64_t off = pos - starts_[k];
      const int64_t take = std::min(n, shards_[k].size() - off);
      shards_[k].copy(off, take, at);
      at += take, pos += take, n -= take, ++k;
    }
  }

 private:
  std::vector<TokenShard> shards_;
  std::vector<int64_t> starts_;
  int64_t size_ = 0;
};

struct DocEntry {
  uint64_t offset, tokens;  // the document's first token in the split; its content tokens
};

std::vector<DocEntry> read_doc_index(const std::string& path) {
  const std::string bytes = read_input_file("document index", path, kStreamedInputBytes);
  MT_CHECK(bytes.size() % sizeof(DocEntry) == 0, path, " is not a document index");
  std::vector<DocEntry> docs(bytes.size() / sizeof(DocEntry));
  std::memcpy(docs.data(), bytes.data(), bytes.size());
  return docs;
}

}  // namespace

std::vector<uint64_t> document_order(uint64_t seed, const std::string& name, int64_t documents) {
  std::vector<uint64_t> order(static_cast<size_t>(documents));
  shuffled_epoch(mix64(seed) ^ hash_name(name), 0, documents, order.data());
  return order;
}

void write_shuffled_split(const std::string& dir, const std::vector<std::string>& shards,
                          const std::string& docs, uint64_t bytes, uint64_t seed,
                          const std::string& name, SplitWriter& to) {
  const ShardStream stream(dir, shards);
  const std::vector<DocEntry> index = read_doc_index(dir + "/" + docs);
  const std::vector<uint64_t> order = document_order(seed, name, int64_t(index.size()));
  std::vector<int> content, end;
  for (const uint64_t i : order) {
    // A document's end marker fills the gap up to the next document (or the split's end).
    const uint64_t next = i + 1 < index.size() ? index[i + 1].offset : uint64_t(stream.size());
    const DocEntry& d = index[i];
    MT_CHECK(d.offset + d.tokens <= next && next <= uint64_t(stream.size()), "document ", i, " of ",
             docs, " lies beyond its shards");
    stream.copy(int64_t(d.offset), int64_t(d.tokens), content);
    stream.copy(int64_t(d.offset + d.tokens), int64_t(next - d.offset - d.tokens), end);
    to.add_document(content, end, 0);
  }
  to.count_bytes(bytes);  // the text of all documents: per document it is not recorded
  for (const std::string& s : shards) std::filesystem::remove(dir + "/" + s);
  std::filesystem::remove(dir + "/" + docs);
}

}  // namespace mt
