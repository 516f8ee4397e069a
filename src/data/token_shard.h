// llm.c token shards (CONTRACTS.md §3): a 1024-byte header of 256 little-endian int32
// ([0] = 20240520 magic, [1] = 1 version, [2] = ntok, the rest 0), then ntok uint16
// tokens. The file size must be exactly 1024 + 2*ntok. Files written by llm.c's
// data scripts (GPT-2 tokens) and by meshtrain (byte tokens) are interchangeable.
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
inline constexpr int32_t kTokenShardVersion = 1;
inline constexpr size_t kTokenShardHeaderInts = 256;
inline constexpr size_t kTokenShardHeaderBytes = kTokenShardHeaderInts * sizeof(int32_t);

// Writes atomically. Throws UsageError for an id outside 0..65535 (uint16 storage) or
// more tokens than the int32 header can declare.
void write_token_shard(const std::string& path, std::span<const int> tokens);
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

// A validated, read-only memory map of a shard: the tokens are paged in on demand, so a
// multi-GB shard costs no load time and ranks in one process share the page cache.
class TokenShard {
 public:
  explicit TokenShard(std::string path);
  ~TokenShard();
  TokenShard(TokenShard&& o) noexcept;
  TokenShard& operator=(TokenShard&& o) noexcept;

  const std::string& path() const { return path_; }
  int64_t size() const { return ntok_; }
  const uint16_t* tokens() const { return tokens_; }
  std::span<const uint16_t> span() const { return {tokens_, static_cast<size_t>(ntok_)}; }
  // Largest token id in the shard (-1 when empty); scans once, then cached (so not
  // thread-safe: each rank owns its own TokenShard / DataLoader).
  int max_token_id() const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t ntok_ = 0;
  mutable int max_id_ = -2;  // -2: not yet computed
};

// Validates the header and size only; returns the declared token count.
int64_t read_token_shard_header(const std::string& path);
// Validates and returns all tokens.
std::vector<uint16_t> read_token_shard(const std::string& path);
// Largest id (-1 when empty). The trainer can derive a vocabulary as max id + 1.
int max_token_id(std::span<const uint16_t> tokens);

}  // namespace mt
