#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"

namespace mt {

// The header and tokens are little-endian on disk and copied with memcpy.
static_assert(std::endian::native == std::endian::little, "meshtrain assumes a little-endian host");

namespace {

std::vector<int32_t> make_header(size_t ntok, int32_t version) {
  MT_REQUIRE(ntok <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), "cannot write ",
             ntok, " tokens into one shard: the int32 header holds at most 2^31-1");
  std::vector<int32_t> header(kTokenShardHeaderInts, 0);
  header[0] = kTokenShardMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(ntok);
  return header;
}

void write_shard(const std::string& path, const void* tokens, size_t ntok, int32_t version) {
  std::vector<int32_t> header = make_header(ntok, version);
  AtomicFile file(path);
  file.write(header.data(), kTokenShardHeaderBytes);
  file.write(tokens, ntok * token_shard_token_bytes(version));
  file.commit();
}

// The size a shard of `ntok` tokens must have; false when it does not fit in 64 bits
// (it always does for an int32 count, but the sum is checked rather than argued).
bool expected_file_bytes(int64_t ntok, int32_t version, uint64_t* bytes) {
  uint64_t tokens = 0;
  return !__builtin_mul_overflow(uint64_t(ntok), token_shard_token_bytes(version), &tokens) &&
         !__builtin_add_overflow(tokens, uint64_t(kTokenShardHeaderBytes), bytes);
}

struct ShardHeader {
  int64_t ntok = 0;
  int32_t version = 0;
  size_t file_bytes = 0;
};

// Opens `path` and checks the header against the file size. The fd is left open for the
// caller (closed on error). Opened by the one bounded reader (core/input_file.h): a FIFO
// is refused, never waited on.
ShardHeader open_and_validate(const std::string& path, int& fd_out) {
  InputFile file("data file", path, kStreamedInputBytes);
  const int fd = file.fd();
  const uint64_t bytes = file.size();
  int32_t header[kTokenShardHeaderInts];
  auto fail = [&](const std::string& msg) { throw UsageError(str("data file ", path, " ", msg)); };
  if (bytes < kTokenShardHeaderBytes)
    fail(str("is ", bytes, " bytes, too small for the ", kTokenShardHeaderBytes,
             "-byte token-shard header (truncated, or not an llm.c token shard)"));
  if (::pread(fd, header, kTokenShardHeaderBytes, 0) !=
      static_cast<ssize_t>(kTokenShardHeaderBytes))
    fail(str("could not be read: ", std::strerror(errno)));
  if (header[0] != kTokenShardMagic)
    fail(str("is not an llm.c token shard: magic number is ", header[0], ", expected ",
             kTokenShardMagic));
  if (header[1] != kTokenShardVersion16 && header[1] != kTokenShardVersion32)
    fail(str("has unsupported token-shard version ", header[1], " (meshtrain reads version ",
             kTokenShardVersion16, ", uint16 tokens, and version ", kTokenShardVersion32,
             ", uint32 tokens)"));
  ShardHeader h;
  h.version = header[1];
  h.ntok = header[2];
  if (h.ntok < 0) fail(str("declares a negative token count (", h.ntok, ")"));
  uint64_t expect = 0;
  if (!expected_file_bytes(h.ntok, h.version, &expect))
    fail(str("declares ", h.ntok, " tokens, more than a file can hold"));
  if (bytes != expect)
    fail(str("declares ", h.ntok, h.version == kTokenShardVersion32 ? " uint32 tokens" : " tokens",
             " (expects ", expect, " bytes) but is ", bytes, " bytes",
             bytes < expect ? " (truncated?)" : ""));
  MT_REQUIRE(bytes <= std::numeric_limits<size_t>::max(), "data file ", path, " is too large");
  fd_out = file.release();
  h.file_bytes = size_t(bytes);
  return h;
}

template <typename Token>
int64_t max_of(const Token* t, int64_t n) {
  if (n == 0) return -1;
  Token m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = t[i] > m ? t[i] : m;
  return int64_t(m);
}

template <typename Token>
int64_t first_at_least(const Token* t, int64_t n, int64_t bound) {
  const Token* hit = std::find_if(t, t + n, [bound](Token x) { return int64_t(x) >= bound; });
  return hit == t + n ? -1 : int64_t(hit - t);
}

}  // namespace

int32_t token_shard_version_for_vocab(int64_t vocab) {
  return vocab <= kTokenShardVocab16 ? kTokenShardVersion16 : kTokenShardVersion32;
}

size_t token_shard_token_bytes(int32_t version) {
  return version == kTokenShardVersion32 ? sizeof(uint32_t) : sizeof(uint16_t);
}

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  write_shard(path, tokens.data(), tokens.size(), kTokenShardVersion16);
}

void write_token_shard(const std::string& path, std::span<const int> tokens, int32_t version) {
  MT_CHECK(version == 0 || version == kTokenShardVersion16 || version == kTokenShardVersion32,
           "token-shard version ", version);
  int max_id = -1;
  for (size_t i = 0; i < tokens.size(); ++i) {
    MT_REQUIRE(tokens[i] >= 0, "cannot write token id ", tokens[i], " (at index ", i, ") to ", path,
               ": token ids are >= 0");
    max_id = std::max(max_id, tokens[i]);
  }
  if (version == 0) version = token_shard_version_for_vocab(int64_t(max_id) + 1);
  if (version == kTokenShardVersion32) {
    write_shard(path, tokens.data(), tokens.size(), version);  // int >= 0 is its uint32
    return;
  }
  std::vector<uint16_t> narrow(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    MT_REQUIRE(tokens[i] < kTokenShardVocab16, "cannot write token id ", tokens[i], " (at index ",
               i, ") to ", path, ": version-1 token shards store uint16 ids 0..65535");
    narrow[i] = static_cast<uint16_t>(tokens[i]);
  }
  write_shard(path, narrow.data(), narrow.size(), version);
}

TokenShard::TokenShard(std::string path) : path_(std::move(path)) {
  int fd = -1;
  const ShardHeader h = open_and_validate(path_, fd);
  ntok_ = h.ntok;
  version_ = h.version;
  map_bytes_ = h.file_bytes;
  void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED)
    throw RuntimeError(str("cannot map data file ", path_, ": ", std::strerror(err)));
  map_ = p;
  // The map is page-aligned and the header 1024 bytes: uint32 tokens are aligned too.
  tokens_ = static_cast<const char*>(p) + kTokenShardHeaderBytes;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

TokenShard::TokenShard(TokenShard&& o) noexcept
    : path_(std::move(o.path_)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      tokens_(std::exchange(o.tokens_, nullptr)),
      ntok_(std::exchange(o.ntok_, 0)),
      version_(o.version_),
      max_id_(o.max_id_) {}

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(map_, o.map_);
  std::swap(map_bytes_, o.map_bytes_);
  std::swap(tokens_, o.tokens_);
  std::swap(ntok_, o.ntok_);
  std::swap(version_, o.version_);
  std::swap(max_id_, o.max_id_);
  return *this;
}

uint32_t TokenShard::token(int64_t i) const {
  MT_CHECK(i >= 0 && i < ntok_, "token ", i, " of ", ntok_, " in ", path_);
  if (version_ == kTokenShardVersion32) return static_cast<const uint32_t*>(tokens_)[i];
  return static_cast<const uint16_t*>(tokens_)[i];
}

void TokenShard::copy(int64_t first, int64_t n, int32_t* out) const {
  MT_CHECK(first >= 0 && n >= 0 && first + n <= ntok_, "tokens [", first, ", ", first + n, ") of ",
           ntok_, " in ", path_);
  // One branch per run, none per token: version 1 widens as it copies (as it always did),
  // version 2 is already 4 bytes a token.
  if (version_ == kTokenShardVersion32) {
    std::memcpy(out, static_cast<const uint32_t*>(tokens_) + first, size_t(n) * sizeof(int32_t));
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(tokens_) + first;
  for (int64_t i = 0; i < n; ++i) out[i] = src[i];
}

int64_t TokenShard::max_token_id() const {
  if (max_id_ == -2)
    max_id_ = version_ == kTokenShardVersion32
                  ? max_of(static_cast<const uint32_t*>(tokens_), ntok_)
                  : max_of(static_cast<const uint16_t*>(tokens_), ntok_);
  return max_id_;
}

int64_t TokenShard::first_token_at_least(int64_t bound) const {
  if (max_token_id() < bound) return -1;  // the cached scan answers the common case
  return version_ == kTokenShardVersion32
             ? first_at_least(static_cast<const uint32_t*>(tokens_), ntok_, bound)
             : first_at_least(static_cast<const uint16_t*>(tokens_), ntok_, bound);
}

int64_t read_token_shard_header(const std::string& path) {
  int fd = -1;
  const ShardHeader h = open_and_validate(path, fd);
  ::close(fd);
  return h.ntok;
}

std::vector<uint32_t> read_token_shard(const std::string& path) {
  TokenShard shard(path);
  std::vector<uint32_t> out(size_t(shard.size()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = shard.token(int64_t(i));
  return out;
}

}  // namespace mt
