// Writing one rank's shard file of a sharded checkpoint (manifest.h): raw fp32 in the
// order the rank's segments were staged, with the CRC-32C of every 1 MiB block computed
// as the bytes go out, then fsync. Plus the background thread a save runs on
// (--save-sync runs the same work on the training thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "train/checkpoint/manifest.h"

namespace mt {

// Creates (or truncates) `path`, writes n floats, fsyncs and closes it. The returned entry
// has the file's base name, size and block checksums. `segments` say which tensor each
// stretch of data holds (offsets in bytes): every value passes the finiteness gate
// (train/finite_gate.h) before the file is created. Throws RuntimeError naming the file and
// the tensor, or the OS error (a full disk shows as "No space left on device").
ManifestFile write_shard_file(const std::string& path, const float* data, size_t n,
                              const std::vector<ManifestSegment>& segments);

// One job at a time on its own thread. The job's failure is kept as a message, not thrown
// into the thread, so the training thread can report it (exit 1 naming the file).
class BackgroundWriter {
 public:
  BackgroundWriter() = default;
  ~BackgroundWriter();
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;

  // Runs job on a new thread (the previous one must have been waited for). The job returns
  // its failure message, "" on success.
  void start(std::function<std::string()> job);
  bool busy() const { return thread_.joinable(); }
  // True once the running job has returned (wait() then does not block).
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Blocks until the job has returned; returns its message ("" when none ran).
  std::string wait();

 private:
  std::thread thread_;
  std::atomic<bool> finished_{false};
  std::string result_;
};

}  // namespace mt
