#include "core/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/output_parents.h"
#include "core/temp_marker.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

[[noreturn]] void throw_errno(const std::string& what, const std::string& path, int err) {
  throw RuntimeError(str(what, " ", path, ": ", std::strerror(err)));
}

void fsync_tree(const fs::path& root) {
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file() || entry.is_directory()) fsync_path(entry.path().string());
  }
  fsync_path(root.string());
}

}  // namespace

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open for fsync", path, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throw_errno("cannot fsync", path, err);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  // The rename would replace a device, FIFO or socket with a regular file.
  require_replaceable_file("output", path_);
  create_parent_directories(path_);
  std::string pattern = path_ + ".tmp-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) throw_errno("cannot create temporary file for", path_, errno);
  temp_path_ = name.data();
  // mkstemp creates 0600; a published file should get the usual umask-based mode.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  MT_CHECK(fd_ >= 0 && !committed_, "write to a closed AtomicFile ", path_);
  const char* p = static_cast<const char*>(data);
  digest_.crc32c = crc32c_update(digest_.crc32c, data, bytes);
  digest_.bytes += bytes;
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      discard();
      throw_errno("cannot write", path_, err);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  MT_CHECK(fd_ >= 0 && !committed_, "commit of a closed AtomicFile ", path_);
  int err = 0;
  if (::fsync(fd_) != 0) err = errno;
  if (::close(fd_) != 0 && err == 0) err = errno;
  fd_ = -1;
  if (err) {
    discard();
    throw_errno("cannot write", path_, err);
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    err = errno;
    discard();
    throw_errno("cannot rename temporary file onto", path_, err);
  }
  committed_ = true;
  fsync_path(parent_directory(path_));
}

FileDigest write_file_atomic(const std::string& path, const void* data, size_t bytes) {
  AtomicFile file(path);
  file.write(data, bytes);
  file.commit();
  return file.digest();
}

namespace {

std::string make_temp_dir(const std::string& pattern_text, const std::string& dir) {
  std::vector<char> name(pattern_text.begin(), pattern_text.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data())) throw_errno("cannot create temporary directory for", dir, errno);
  return name.data();
}

std::string base_name(const std::string& path) {
  return fs::path(path).filename().string();
}

// Moves the existing `dir` aside and `temp` into its place. Returns the name the old copy
// has now (marked as meshtrain's temporary before it got that name, so a crash leaves a
// provable leftover). Throws with `dir` as it was (its inert marker aside).
std::string swap_in(const std::string& temp, const std::string& dir) {
  mark_temporary(dir, base_name(temp));  // the exchange gives the old copy temp's name
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) return temp;
  if (errno != EINVAL && errno != ENOSYS) {
    const int err = errno;
    unmark_temporary(dir);
    throw_errno("cannot publish", dir, err);
  }
  // No RENAME_EXCHANGE on this filesystem: park the old copy under a unique name (a rename
  // onto an empty directory replaces it), then move the new one in.
  const std::string old = make_temp_dir(dir + ".old-XXXXXX", dir);
  mark_temporary(dir, base_name(old));
  if (::rename(dir.c_str(), old.c_str()) != 0) {
    const int err = errno;
    ::rmdir(old.c_str());
    unmark_temporary(dir);
    throw_errno("cannot move aside", dir, err);
  }
  if (::rename(temp.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    ::rename(old.c_str(), dir.c_str());  // put the old copy back
    unmark_temporary(dir);
    throw_errno("cannot publish", dir, err);
  }
  return old;
}

}  // namespace

void publish_dir_atomic(const std::string& dir_arg,
                        const std::function<void(const std::string& temp_dir)>& fill) {
  const std::string dir = strip_trailing_slashes(dir_arg);
  std::error_code ec;
  auto status = fs::symlink_status(dir, ec);
  const bool exists = fs::exists(status);
  if (exists && !fs::is_directory(status))
    throw UsageError(str(dir, " exists and is not a directory; refusing to replace it"));
  create_parent_directories(dir);

  const std::string temp = make_temp_dir(dir + ".tmp-XXXXXX", dir);
  // mkdtemp creates 0700; give the published directory the usual umask-based mode.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(temp.c_str(), 0777 & ~mask);

  // What to delete at the end: the temporary on failure, the previous copy on success.
  std::string leftover = temp;
  try {
    mark_temporary(temp);  // before anything else is in it: a crash leaves a provable temporary
    fill(temp);
    fsync_tree(temp);
    if (!exists) {
      if (::rename(temp.c_str(), dir.c_str()) != 0) throw_errno("cannot publish", dir, errno);
    } else {
      leftover = swap_in(temp, dir);
    }
  } catch (...) {
    fs::remove_all(temp, ec);
    throw;
  }
  // The new directory carries its temporary's marker, inert under its new name: drop it.
  unmark_temporary(dir);
  fsync_path(dir);
  fsync_path(parent_directory(dir));
  fs::remove_all(leftover, ec);
}

}  // namespace mt
