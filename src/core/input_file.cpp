#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace mt {

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

}  // namespace

std::string open_failure_reason(int errno_value) {
  switch (errno_value) {
    case ENOENT:
      return "does not exist";
    case ENOTDIR:
      return "does not exist (a part of the path is not a directory)";
    case ELOOP:
      return "is a symlink loop (too many levels of symbolic links)";
    case EACCES:
      return "is not readable (permission denied)";
    default:
      return str("cannot be opened (", std::strerror(errno_value), ")");
  }
}

InputFile::InputFile(const std::string& what, const std::string& path, uint64_t max_bytes)
    : what_(what), path_(path) {
  MT_REQUIRE(!path.empty(), what, " needs a file name (got an empty path)");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) throw UsageError(str(what, " ", path, " ", open_failure_reason(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw UsageError(str(what, " ", path, ": cannot look at it (", std::strerror(err), ")"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw UsageError(str(what, " ", path, " is ", kind_of(st.st_mode), "; give a regular file"));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > max_bytes) {
    ::close(fd_);
    fd_ = -1;
    throw UsageError(str(what, " ", path, " is ", size_, " bytes, over the limit of ", max_bytes,
                         " for this kind of file"));
  }
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

std::string InputFile::read_all() const {
  std::string out(size_, '\0');
  uint64_t done = 0;
  while (done < size_) {
    const ssize_t n = ::pread(fd_, out.data() + done, size_ - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw RuntimeError(str(what_, " ", path_, ": read failed after ", done, " of ", size_,
                             " bytes (", n < 0 ? std::strerror(errno) : "file shrank", ")"));
    done += static_cast<uint64_t>(n);
  }
  return out;
}

std::string read_input_file(const std::string& what, const std::string& path, uint64_t max_bytes) {
  return InputFile(what, path, max_bytes).read_all();
}

}  // namespace mt
