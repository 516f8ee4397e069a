// The one way to read a file a user names (a config, a hardware profile, a dataset manifest,
// a tokenizer, a metrics file): open without blocking, look at what the descriptor is, and
// read at most a stated number of bytes.
//   - open(2) with O_NONBLOCK: opening a FIFO for reading otherwise blocks until a writer
//     appears, forever, and no --timeout covers it; a check by path before the open races
//     with whoever replaces the path, so the kind is checked on the descriptor itself;
//   - only regular files are read: a FIFO, socket, device or directory is refused by name;
//   - a size limit per kind of file: a crafted or mistaken 100 GB "manifest" is refused
//     before it is read, not after memory runs out.
// Failures throw UsageError (exit 2) naming `what` (the flag or file role), the path and
// what is wrong; ELOOP and EACCES are told apart from "does not exist".
#pragma once

#include <cstdint>
#include <string>

namespace mt {

// Size limits for the kinds of input meshtrain reads whole into memory.
inline constexpr uint64_t kMaxJsonInputBytes = 64ull << 20;   // manifests, configs, profiles
inline constexpr uint64_t kMaxTextInputBytes = 1ull << 30;    // metrics files, logs
inline constexpr uint64_t kMaxModelFileBytes = 256ull << 20;  // tokenizer models
// Inputs read in pieces, never whole (a corpus of prepare): any size.
inline constexpr uint64_t kStreamedInputBytes = UINT64_MAX;

// A read-only descriptor of a regular file, closed on destruction.
class InputFile {
 public:
  // Opens `path` without blocking and checks that it is a regular file of at most
  // `max_bytes` bytes.
  InputFile(const std::string& what, const std::string& path, uint64_t max_bytes);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  // Hands the descriptor to the caller (to map or stream it), who then closes it.
  int release();
  uint64_t size() const { return size_; }
  // The whole file (its size as fstat saw it at open; a file that shrinks meanwhile is an
  // I/O error, one that grows is read up to that size).
  std::string read_all() const;

 private:
  std::string what_, path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// InputFile(what, path, max_bytes).read_all().
std::string read_input_file(const std::string& what, const std::string& path, uint64_t max_bytes);

// The reason `errno_value` gave for failing to open or stat `path`, in the words a user
// needs ("does not exist", "is a symlink loop", "is not readable (Permission denied)").
std::string open_failure_reason(int errno_value);

}  // namespace mt
