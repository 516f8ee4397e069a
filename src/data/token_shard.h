// llm.c token shards (docs/contracts.md §3 and §10): a 1024-byte header of 256 little-endian
// int32 ([0] = 20240520 magic, [1] = version, [2] = ntok, the rest 0), then ntok
// little-endian tokens:
//   version 1: uint16 tokens, file size 1024 + 2*ntok (vocabularies up to 65,536 ids);
//   version 2: uint32 tokens, file size 1024 + 4*ntok (larger vocabularies, up to 2^31-1).
// Files written by llm.c's data scripts (GPT-2 tokens, version 1) and by meshtrain are
// interchangeable. Writers use version 1 whenever the ids fit it, so a byte-level or
// GPT-2 dataset costs 2 bytes a token as before.
//
// A bad file is the user's to fix: every check throws UsageError naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mt {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion16 = 1;  // uint16 tokens
inline constexpr int32_t kTokenShardVersion32 = 2;  // uint32 tokens
inline constexpr size_t kTokenShardHeaderInts = 256;
inline constexpr size_t kTokenShardHeaderBytes = kTokenShardHeaderInts * sizeof(int32_t);
// The largest vocabulary whose ids all fit a version-1 (uint16) shard.
inline constexpr int64_t kTokenShardVocab16 = 65536;

// The version a vocabulary of `vocab` ids is written in: 1 when every id fits uint16.
int32_t token_shard_version_for_vocab(int64_t vocab);
// Bytes per token of a version (2 or 4).
size_t token_shard_token_bytes(int32_t version);

// Writes atomically, in `version` (0: the narrowest that holds every id). Throws
// UsageError for a negative id, an id the version cannot store, or more tokens than the
// int32 header can declare.
void write_token_shard(const std::string& path, std::span<const int> tokens, int32_t version = 0);
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);  // version 1

// A validated, read-only memory map of a shard of either version: the tokens are paged in
// on demand, so a multi-GB shard costs no load time and ranks in one process share the page
// cache. Tokens are read as stored (uint16 or uint32); copy() widens a run to int32.
class TokenShard {
 public:
  explicit TokenShard(std::string path);
  ~TokenShard();
  TokenShard(TokenShard&& o) noexcept;
  TokenShard& operator=(TokenShard&& o) noexcept;

  const std::string& path() const { return path_; }
  int64_t size() const { return ntok_; }
  int32_t version() const { return version_; }
  uint32_t token(int64_t i) const;
  // out[0 .. n) = tokens [first, first + n) as int32. The caller has checked the ids
  // against the vocabulary (require_vocab), so every id it copies fits int32.
  void copy(int64_t first, int64_t n, int32_t* out) const;
  // Largest token id in the shard (-1 when empty); scans once, then cached (so not
  // thread-safe: each rank owns its own TokenShard / DataLoader).
  int64_t max_token_id() const;
  // Index of the first token >= bound, or -1 when there is none.
  int64_t first_token_at_least(int64_t bound) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;  // uint16 (version 1) or uint32 (version 2)
  int64_t ntok_ = 0;
  int32_t version_ = kTokenShardVersion16;
  mutable int64_t max_id_ = -2;  // -2: not yet computed
};

// Validates the header and size only; returns the declared token count.
int64_t read_token_shard_header(const std::string& path);
// Validates and returns all tokens.
std::vector<uint32_t> read_token_shard(const std::string& path);

}  // namespace mt
