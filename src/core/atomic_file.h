// Crash-safe file and directory writes: a reader (or a restarted run) sees either the
// complete old content or the complete new content, never a half-written file.
//
// Files: bytes go to a temporary sibling "PATH.tmp-XXXXXX" (same directory, so the final
// rename never crosses a filesystem), which is fsynced, renamed over PATH, and then the
// directory is fsynced so the rename itself survives a power cut.
//
// Directories (checkpoints): publish_dir_atomic() fills a sibling "DIR.tmp-XXXXXX",
// fsyncs every file in it, then swaps it into place. When DIR already exists the swap is
// one renameat2(RENAME_EXCHANGE), so at every instant DIR names a complete directory
// (old or new); the old one is then deleted. Filesystems without RENAME_EXCHANGE fall
// back to two renames (DIR -> DIR.old-XXXXXX, tmp -> DIR), leaving a short window in
// which DIR is absent but DIR.old-XXXXXX still holds the previous complete copy.
//
// Every temporary directory holds a marker (core/temp_marker.h) from the moment it exists
// (the old copy: from just before it is renamed), so the "DIR.tmp-XXXXXX" / "DIR.old-XXXXXX"
// a crash leaves behind are provably meshtrain's: SaveDirLock deletes those and nothing
// else named alike. Failures throw RuntimeError naming the path and the OS error, after
// removing whatever temporary they created.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace mt {

// Size and CRC-32C of everything written to a file (core/crc32c.h), for manifests.
struct FileDigest {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

// Streams bytes into a temporary file; commit() publishes it under the final path.
// Destroying an uncommitted AtomicFile removes the temporary (the target is untouched).
// Throws UsageError, before creating anything, when the path names something a rename must
// not replace (a device, FIFO, socket or directory: core/file_checks.h).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  // fsync, rename over the target, fsync the directory. Call at most once.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  // Of the bytes written so far: computed as they stream past, so a manifest costs no
  // second read of the file.
  const FileDigest& digest() const { return digest_; }

 private:
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  FileDigest digest_;
};

// Writes the whole of `data` to `path` atomically.
FileDigest write_file_atomic(const std::string& path, const void* data, size_t bytes);
inline FileDigest write_file_atomic(const std::string& path, std::string_view data) {
  return write_file_atomic(path, data.data(), data.size());
}

// Creates a temporary sibling of `dir`, calls fill(temp_dir) to populate it (plain
// writes are enough: every regular file is fsynced afterwards), then publishes it as
// `dir`, replacing an existing directory as described above. If `dir` exists and is not a
// directory, throws UsageError and touches nothing. If fill throws, the temporary is
// removed and the exception propagates; an existing `dir` is left as it was.
void publish_dir_atomic(const std::string& dir,
                        const std::function<void(const std::string& temp_dir)>& fill);

// fsync on a path (file or directory); throws RuntimeError on failure.
void fsync_path(const std::string& path);

}  // namespace mt
