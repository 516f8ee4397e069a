#include "core/temp_marker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr uint64_t kMaxMarkerBytes = 4096;

std::string marker_text(const std::string& name) {
  return "meshtrain temporary directory " + name + "\n";
}

std::string base_name(const std::string& path) {
  return fs::path(strip_trailing_slashes(path)).filename().string();
}

}  // namespace

void mark_temporary(const std::string& dir, const std::string& as_name) {
  const std::string path = dir + "/" + kTempMarkerFile;
  const std::string text = marker_text(as_name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw RuntimeError(str("cannot mark ", dir, " as temporary: ", std::strerror(errno)));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = n < 0 ? errno : 0;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (n != ssize_t(text.size()) || !synced)
    throw RuntimeError(str("cannot mark ", dir, " as temporary: ",
                           err ? std::strerror(err) : "short write or fsync failure"));
}

void mark_temporary(const std::string& dir) {
  mark_temporary(dir, base_name(dir));
}

bool is_marked_temporary(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  try {
    const std::string text =
        read_input_file("marker", dir + "/" + kTempMarkerFile, kMaxMarkerBytes);
    return text == marker_text(base_name(dir));
  } catch (const std::exception&) {
    return false;  // missing, a FIFO, unreadable: not proof
  }
}

bool remove_if_marked_temporary(const std::string& dir) {
  if (!is_marked_temporary(dir)) return false;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return !ec;
}

void unmark_temporary(const std::string& dir) {
  ::unlink((dir + "/" + kTempMarkerFile).c_str());
}

void create_marked_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0777) != 0)
    throw RuntimeError(str("cannot create ", path, ": ", std::strerror(errno)));
  mark_temporary(path);
}

}  // namespace mt
