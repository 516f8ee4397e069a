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

std::vector<int32_t> make_header(size_t ntok) {
  MT_REQUIRE(ntok <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), "cannot write ",
             ntok, " tokens into one shard: the int32 header holds at most 2^31-1");
  std::vector<int32_t> header(kTokenShardHeaderInts, 0);
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = static_cast<int32_t>(ntok);
  return header;
}

void write_shard(const std::string& path, const uint16_t* tokens, size_t ntok) {
  std::vector<int32_t> header = make_header(ntok);
  AtomicFile file(path);
  file.write(header.data(), kTokenShardHeaderBytes);
  file.write(tokens, ntok * sizeof(uint16_t));
  file.commit();
}

// Opens `path` and checks the header against the file size; returns ntok. The fd is
// left open for the caller (closed on error). Opened by the one bounded reader
// (core/input_file.h): a FIFO is refused, never waited on.
int64_t open_and_validate(const std::string& path, int& fd_out, size_t& file_bytes) {
  InputFile file("data file", path, kStreamedInputBytes);
  const int fd = file.fd();
  const size_t bytes = static_cast<size_t>(file.size());
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
  if (header[1] != kTokenShardVersion)
    fail(str("has unsupported token-shard version ", header[1], " (meshtrain reads version ",
             kTokenShardVersion, ": uint16 tokens)"));
  const int64_t ntok = header[2];
  if (ntok < 0) fail(str("declares a negative token count (", ntok, ")"));
  const size_t expect = kTokenShardHeaderBytes + 2 * static_cast<size_t>(ntok);
  if (bytes != expect)
    fail(str("declares ", ntok, " tokens (expects ", expect, " bytes) but is ", bytes, " bytes",
             bytes < expect ? " (truncated?)" : ""));
  fd_out = file.release();
  file_bytes = bytes;
  return ntok;
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  write_shard(path, tokens.data(), tokens.size());
}

void write_token_shard(const std::string& path, std::span<const int> tokens) {
  std::vector<uint16_t> narrow(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    MT_REQUIRE(tokens[i] >= 0 && tokens[i] <= 65535, "cannot write token id ", tokens[i],
               " (at index ", i, ") to ", path, ": token shards store uint16 ids 0..65535");
    narrow[i] = static_cast<uint16_t>(tokens[i]);
  }
  write_shard(path, narrow.data(), narrow.size());
}

TokenShard::TokenShard(std::string path) : path_(std::move(path)) {
  int fd = -1;
  ntok_ = open_and_validate(path_, fd, map_bytes_);
  void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED)
    throw RuntimeError(str("cannot map data file ", path_, ": ", std::strerror(err)));
  map_ = p;
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(p) + kTokenShardHeaderBytes);
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
      max_id_(o.max_id_) {}

TokenShard& TokenShard::operator=(TokenShard&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(map_, o.map_);
  std::swap(map_bytes_, o.map_bytes_);
  std::swap(tokens_, o.tokens_);
  std::swap(ntok_, o.ntok_);
  std::swap(max_id_, o.max_id_);
  return *this;
}

int TokenShard::max_token_id() const {
  if (max_id_ == -2) max_id_ = mt::max_token_id(span());
  return max_id_;
}

int64_t read_token_shard_header(const std::string& path) {
  int fd = -1;
  size_t bytes = 0;
  int64_t ntok = open_and_validate(path, fd, bytes);
  ::close(fd);
  return ntok;
}

std::vector<uint16_t> read_token_shard(const std::string& path) {
  TokenShard shard(path);
  return {shard.tokens(), shard.tokens() + shard.size()};
}

int max_token_id(std::span<const uint16_t> tokens) {
  if (tokens.empty()) return -1;
  return *std::max_element(tokens.begin(), tokens.end());
}

}  // namespace mt
