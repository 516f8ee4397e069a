#include "train/checkpoint/shard_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/crc32c.h"
#include "core/error.h"
#include "train/checkpoint/checkpoint_contents.h"

namespace mt {

namespace {

constexpr size_t kCachedBlocks = 4;

// pread until `n` bytes or end of file; returns the bytes read.
size_t pread_full(int fd, char* dst, size_t n, uint64_t at, const std::string& path) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, dst + got, n - got, off_t(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw RuntimeError(str(path, ": cannot read (", std::strerror(errno), ")"));
    if (r == 0) break;
    got += size_t(r);
  }
  return got;
}

std::string damaged(const std::string& path, uint64_t block, uint32_t got, uint32_t want,
                    const std::string& what) {
  return str(path, ": block ", block, " (bytes ", block * kShardBlockBytes, "..",
             (block + 1) * kShardBlockBytes - 1, ") of ", what, " fails its checksum (crc32c ",
             crc32c_hex(got), ", recorded ", crc32c_hex(want),
             "): the shard is damaged; load another checkpoint");
}

}  // namespace

ShardReader::ShardReader(std::string dir, const Manifest& m)
    : dir_(std::move(dir)), m_(m), fds_(m.files.size(), -1) {
  for (size_t i = 0; i < m.tensors.size(); ++i) tensor_index_.emplace(m.tensors[i].name, i);
  for (size_t i = 0; i < m.segments.size(); ++i) segments_of_[m.segments[i].tensor].push_back(i);
}

ShardReader::~ShardReader() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

const ManifestTensor* ShardReader::tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &m_.tensors[it->second];
}

int ShardReader::fd(int file, const std::string& tensor) {
  if (fds_[size_t(file)] >= 0) return fds_[size_t(file)];
  const ManifestFile& f = m_.files[size_t(file)];
  const std::string path = dir_ + "/" + f.name;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  MT_REQUIRE(fd >= 0, path, ": missing shard (", std::strerror(errno), "), which holds tensor ",
             tensor, "; load another checkpoint");
  struct stat st {};
  ::fstat(fd, &st);
  if (!S_ISREG(st.st_mode) || uint64_t(st.st_size) != f.bytes) {
    ::close(fd);
    MT_REQUIRE(false, path, ": ", S_ISREG(st.st_mode) ? "" : "not a regular file; ", "size ",
               st.st_size, " bytes, the manifest records ", f.bytes,
               " (truncated or replaced), it holds tensor ", tensor, "; load another checkpoint");
  }
  fds_[size_t(file)] = fd;
  return fd;
}

const ShardReader::Block& ShardReader::block(int file, uint64_t index, const std::string& tensor) {
  ++tick_;
  for (Block& b : cache_)
    if (b.file == file && b.index == index) {
      b.last_use = tick_;
      return b;
    }
  Block* slot = nullptr;
  if (cache_.size() < kCachedBlocks) {
    cache_.emplace_back();
    slot = &cache_.back();
  } else {
    slot = &*std::min_element(cache_.begin(), cache_.end(), [](const Block& a, const Block& b) {
      return a.last_use < b.last_use;
    });
  }
  const ManifestFile& f = m_.files[size_t(file)];
  const std::string path = dir_ + "/" + f.name;
  const uint64_t at = index * kShardBlockBytes;
  const size_t n = size_t(std::min<uint64_t>(kShardBlockBytes, f.bytes - at));
  slot->data.resize(n);
  const size_t got = pread_full(fd(file, tensor), slot->data.data(), n, at, path);
  MT_REQUIRE(got == n, path, ": ends at byte ", at + got, ", the manifest records ", f.bytes,
             " (truncated), it holds tensor ", tensor, "; load another checkpoint");
  const uint32_t crc = crc32c_update(0, slot->data.data(), n);
  MT_REQUIRE(crc == f.block_crc32c[size_t(index)],
             damaged(path, index, crc, f.block_crc32c[size_t(index)], "tensor " + tensor));
  bytes_read_ += n;
  slot->file = file;
  slot->index = index;
  slot->last_use = tick_;
  return *slot;
}

const std::vector<ShardReader::Interval>& ShardReader::index_of(const std::string& tensor) {
  auto it = intervals_.find(tensor);
  if (it != intervals_.end()) return it->second;
  std::vector<Interval> v;
  const auto segs = segments_of_.find(tensor);
  if (segs != segments_of_.end())
    for (size_t si : segs->second) {
      const ManifestSegment& s = m_.segments[si];
      uint64_t byte = s.offset;
      for_each_interval(s.runs, [&](int64_t a, int64_t n) {
        v.push_back({a, n, s.file, byte});
        byte += uint64_t(n) * sizeof(float);
      });
    }
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.gstart < b.gstart; });
  return intervals_.emplace(tensor, std::move(v)).first->second;
}

void ShardReader::read(const std::string& tensor, int64_t start, int64_t len, float* dst) {
  const std::vector<Interval>& v = index_of(tensor);
  // The manifest was checked to tile every tensor, so the intervals after the one holding
  // `start` continue without gaps.
  auto it = std::upper_bound(v.begin(), v.end(), start,
                             [](int64_t g, const Interval& i) { return g < i.gstart; });
  MT_REQUIRE(it != v.begin(), dir_, "/", kManifestFile, ": does not cover tensor ", tensor);
  --it;
  char* out = reinterpret_cast<char*>(dst);
  while (len > 0) {
    MT_REQUIRE(it != v.end() && start >= it->gstart && start < it->gstart + it->len, dir_, "/",
               kManifestFile, ": does not cover element ", start, " of tensor ", tensor);
    const int64_t take = std::min(len, it->gstart + it->len - start);
    uint64_t at = it->byte + uint64_t(start - it->gstart) * sizeof(float);
    uint64_t bytes = uint64_t(take) * sizeof(float);
    while (bytes > 0) {
      const uint64_t bi = at / kShardBlockBytes, in = at % kShardBlockBytes;
      const Block& b = block(it->file, bi, tensor);
      const uint64_t n = std::min<uint64_t>(bytes, b.data.size() - in);
      std::memcpy(out, b.data.data() + in, n);
      out += n;
      at += n;
      bytes -= n;
    }
    start += take;
    len -= take;
    ++it;
  }
}

uint64_t verify_shards(const std::string& dir, const Manifest& m) {
  std::vector<char> buf(kShardBlockBytes);
  uint64_t total = 0;
  for (size_t fi = 0; fi < m.files.size(); ++fi) {
    const ManifestFile& f = m.files[fi];
    const std::string path = dir + "/" + f.name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    MT_REQUIRE(fd >= 0, path, ": missing shard (", std::strerror(errno), "), which holds ",
               tensors_in(m, int(fi), 0, UINT64_MAX), "; load another checkpoint");
    struct stat st {};
    ::fstat(fd, &st);
    const bool regular = S_ISREG(st.st_mode);
    if (!regular || uint64_t(st.st_size) != f.bytes) {
      ::close(fd);
      MT_REQUIRE(false, path, ": ", regular ? "" : "not a regular file; ", "size ", st.st_size,
                 " bytes, the manifest records ", f.bytes, " (truncated or replaced), it holds ",
                 tensors_in(m, int(fi), regular ? uint64_t(st.st_size) : 0, UINT64_MAX),
                 "; load another checkpoint");
    }
    NonFiniteScan scan;  // every byte of a shard is an fp32 value
    for (size_t b = 0; b < f.block_crc32c.size(); ++b) {
      const uint64_t at = uint64_t(b) * kShardBlockBytes;
      const size_t n = size_t(std::min<uint64_t>(kShardBlockBytes, f.bytes - at));
      size_t got = 0;
      try {
        got = pread_full(fd, buf.data(), n, at, path);
      } catch (...) {
        ::close(fd);
        throw;
      }
      const uint32_t crc = crc32c_update(0, buf.data(), got);
      if (got != n || crc != f.block_crc32c[b]) {
        ::close(fd);
        MT_REQUIRE(got == n, path, ": ends at byte ", at + got, ", the manifest records ", f.bytes,
                   " (truncated); load another checkpoint");
        throw UsageError(
            damaged(path, b, crc, f.block_crc32c[b], tensors_in(m, int(fi), at, at + n)));
      }
      scan.feed(buf.data(), n, at);
      total += n;
    }
    ::close(fd);
    if (const auto bad = scan.found())
      throw UsageError(str(path, ": ", tensors_in(m, int(fi), *bad, *bad + 4),
                           " holds NaN or Inf values (byte ", *bad,
                           " of the shard); the run that wrote it diverged or the shard was "
                           "edited, and a load would refuse it"));
  }
  return total;
}

}  // namespace mt
