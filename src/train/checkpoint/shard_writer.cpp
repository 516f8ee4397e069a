#include "train/checkpoint/shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/threads.h"
#include "train/finite_gate.h"

namespace mt {

namespace {

[[noreturn]] void fail(const std::string& path, const char* what, int err) {
  throw RuntimeError(str("writing ", path, ": ", what, " (", std::strerror(err), ")"));
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

ManifestFile write_shard_file(const std::string& path, const float* data, size_t n,
                              const std::vector<ManifestSegment>& segments) {
  std::vector<GateTensor> gate;
  for (const ManifestSegment& s : segments) {
    const size_t first = size_t(s.offset / sizeof(float)), count = size_t(s.elements());
    MT_CHECK(first + count <= n, "segment of ", s.tensor, " beyond the staged data");
    gate.push_back({s.tensor, data + first, count});
  }
  require_finite_for_disk(path, gate, DiskDtype::f32);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail(path, "cannot create", errno);
  ManifestFile f;
  f.name = base_name(path);
  f.bytes = uint64_t(n) * sizeof(float);
  const char* p = reinterpret_cast<const char*>(data);
  uint64_t done = 0;
  try {
    while (done < f.bytes) {
      const size_t chunk = size_t(std::min<uint64_t>(kShardBlockBytes, f.bytes - done));
      f.block_crc32c.push_back(crc32c_update(0, p + done, chunk));
      size_t put = 0;
      while (put < chunk) {
        const ssize_t w = ::write(fd, p + done + put, chunk - put);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) fail(path, "cannot write", errno);
        put += size_t(w);
      }
      done += chunk;
    }
    // A full disk may only show here, when delayed allocation meets the device.
    if (::fsync(fd) != 0) fail(path, "cannot fsync", errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail(path, "cannot close", errno);
  return f;
}

BackgroundWriter::~BackgroundWriter() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundWriter::start(std::function<std::string()> job) {
  MT_CHECK(!thread_.joinable(), "a checkpoint write is already running");
  finished_.store(false, std::memory_order_release);
  result_.clear();
  thread_ = start_thread("the background checkpoint writer", [this, job = std::move(job)]() {
    std::string r;
    try {
      r = job();
    } catch (const std::exception& e) {
      r = e.what();
    } catch (...) {
      r = "unknown failure";
    }
    result_ = std::move(r);
    finished_.store(true, std::memory_order_release);
  });
}

std::string BackgroundWriter::wait() {
  if (!thread_.joinable()) return "";
  thread_.join();
  return result_;
}

}  // namespace mt
