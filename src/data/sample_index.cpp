#include "data/sample_index.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/rng.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr char kMagic[8] = {'M', 'T', 'S', 'A', 'M', 'P', 'L', 'E'};
constexpr uint64_t kVersion = 1;
constexpr uint64_t kShuffleStream = 0x73616d706c6573ull;  // "samples"

// The 64-byte header; the file is this, then n uint64 entries.
struct Header {
  char magic[8];
  uint64_t version, seed, epoch, n, crc, reserved[2];
};
static_assert(sizeof(Header) == 64);

Header expected_header(uint64_t seed, int64_t epoch, int64_t n) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.seed = seed;
  h.epoch = uint64_t(epoch);
  h.n = uint64_t(n);
  return h;
}

// Whether the mapped bytes are the index of (seed, epoch, n): identity, size and checksum.
bool is_valid_index(const void* map, size_t bytes, const Header& want) {
  if (bytes != sizeof(Header) + want.n * sizeof(uint64_t)) return false;
  Header have;
  std::memcpy(&have, map, sizeof have);
  if (std::memcmp(have.magic, want.magic, sizeof kMagic) != 0 || have.version != want.version ||
      have.seed != want.seed || have.epoch != want.epoch || have.n != want.n)
    return false;
  const char* entries = static_cast<const char*>(map) + sizeof(Header);
  return crc32c_update(0, entries, bytes - sizeof(Header)) == have.crc;
}

// Maps `path` read-only; null (and bytes 0) when it cannot be opened or mapped.
void* map_file(const std::string& path, size_t& bytes) {
  bytes = 0;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return nullptr;
  struct stat st {};
  void* p = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    p = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    bytes = size_t(st.st_size);
  }
  ::close(fd);  // the mapping keeps the file alive
  if (p == MAP_FAILED) bytes = 0;
  return p == MAP_FAILED ? nullptr : p;
}

void build_index_file(const std::string& path, uint64_t seed, int64_t epoch, int64_t n) {
  std::vector<uint64_t> file(sizeof(Header) / sizeof(uint64_t) + size_t(n));
  uint64_t* perm = file.data() + sizeof(Header) / sizeof(uint64_t);
  shuffled_epoch(seed, epoch, n, perm);
  Header h = expected_header(seed, epoch, n);
  h.crc = crc32c_update(0, perm, size_t(n) * sizeof(uint64_t));
  std::memcpy(file.data(), &h, sizeof h);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec)
    throw RuntimeError(str("cannot create the sample-index folder ",
                           fs::path(path).parent_path().string(), ": ", ec.message()));
  write_file_atomic(path, file.data(), file.size() * sizeof(uint64_t));
}

}  // namespace

void shuffled_epoch(uint64_t seed, int64_t epoch, int64_t n, uint64_t* perm) {
  for (int64_t i = 0; i < n; ++i) perm[i] = uint64_t(i);
  const uint64_t stream = mix64(seed ^ mix64(kShuffleStream)) + mix64(uint64_t(epoch));
  // Fisher-Yates, j uniform in 0..i from a counter-based draw (Lemire's multiply-shift).
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t x = mix64(stream + uint64_t(i));
    const uint64_t j = uint64_t((unsigned __int128)x * uint64_t(i + 1) >> 64);
    std::swap(perm[i], perm[j]);
  }
}

SampleIndex::SampleIndex(uint64_t seed, int64_t n, std::string dir)
    : seed_(seed), n_(n), dir_(std::move(dir)) {
  MT_CHECK(n > 0, "a sample index needs samples");
}

SampleIndex::~SampleIndex() {
  unmap();
}

SampleIndex::SampleIndex(SampleIndex&& o) noexcept
    : seed_(o.seed_),
      n_(o.n_),
      dir_(std::move(o.dir_)),
      epoch_(std::exchange(o.epoch_, -1)),
      map_(std::exchange(o.map_, nullptr)),
      map_bytes_(std::exchange(o.map_bytes_, 0)),
      entries_(std::exchange(o.entries_, nullptr)) {}

SampleIndex& SampleIndex::operator=(SampleIndex&& o) noexcept {
  if (this != &o) {
    unmap();
    seed_ = o.seed_;
    n_ = o.n_;
    dir_ = std::move(o.dir_);
    epoch_ = std::exchange(o.epoch_, -1);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    entries_ = std::exchange(o.entries_, nullptr);
  }
  return *this;
}

std::string SampleIndex::epoch_path(int64_t epoch) const {
  return dir_ + "/seed" + std::to_string(seed_) + "-n" + std::to_string(n_) + "-epoch" +
         std::to_string(epoch) + ".idx";
}

void SampleIndex::unmap() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  entries_ = nullptr;
  epoch_ = -1;
}

void SampleIndex::map_epoch(int64_t epoch) {
  unmap();
  const std::string path = epoch_path(epoch);
  const Header want = expected_header(seed_, epoch, n_);
  // Use the file only when it is exactly this epoch's index; otherwise build it (once).
  for (int attempt = 0; attempt < 2; ++attempt) {
    size_t bytes = 0;
    void* p = map_file(path, bytes);
    if (p && is_valid_index(p, bytes, want)) {
      map_ = p;
      map_bytes_ = bytes;
      entries_ = reinterpret_cast<const uint64_t*>(static_cast<const char*>(p) + sizeof(Header));
      epoch_ = epoch;
      return;
    }
    if (p) ::munmap(p, bytes);
    if (attempt == 0) build_index_file(path, seed_, epoch, n_);
  }
  throw RuntimeError(str("the sample index ", path, " does not read back as written"));
}

int64_t SampleIndex::sample(int64_t draw) {
  MT_CHECK(draw >= 0, "draw ", draw);
  const int64_t epoch = draw / n_;
  if (epoch != epoch_) map_epoch(epoch);
  return int64_t(entries_[draw % n_]);
}

}  // namespace mt
