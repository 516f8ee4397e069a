#include "core/file_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace mt {

namespace {

std::string type_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// stat through symlinks; false with errno set when nothing usable is there.
bool stat_path(const std::string& path, struct stat& st) {
  return ::stat(path.c_str(), &st) == 0;
}

void require_missing_is_absence(const std::string& flag, const std::string& path, int err) {
  // ENOENT / ENOTDIR: nothing there, which an output may be. Anything else (EACCES on a
  // directory of the path, ELOOP) means we could not look.
  MT_REQUIRE(err == ENOENT || err == ENOTDIR, flag, " ", path, ": cannot look at it (",
             std::strerror(err), ")");
}

void require_writable_parent(const std::string& flag, const std::string& path) {
  const std::string dir = parent_directory(path);
  struct stat st {};
  MT_REQUIRE(stat_path(dir, st), flag, " ", path, ": directory ", dir,
             " does not exist (create it first)");
  MT_REQUIRE(S_ISDIR(st.st_mode), flag, " ", path, ": ", dir, " is ", type_of(st.st_mode),
             ", not a directory");
  MT_REQUIRE(::access(dir.c_str(), W_OK | X_OK) == 0, flag, " ", path, ": directory ", dir,
             " is not writable (", std::strerror(errno), ")");
}

}  // namespace

std::optional<FileId> file_id(const std::string& path) {
  struct stat st {};
  if (path.empty() || !stat_path(path, st)) return std::nullopt;
  return FileId{st.st_dev, st.st_ino};
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string parent_directory(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(strip_trailing_slashes(path)).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

namespace {

// An existing input of the wanted kind (through symlinks) that this process may read.
void require_input(const std::string& flag, const std::string& path, bool directory) {
  const char* noun = directory ? "directory" : "file";
  MT_REQUIRE(!path.empty(), flag, " needs a ", noun, " name (got an empty path)");
  struct stat st {};
  if (!stat_path(path, st)) {
    const int err = errno;
    MT_REQUIRE(err != ENOENT, flag, " ", path, " does not exist");
    throw UsageError(str(flag, " ", path, ": cannot open (", std::strerror(err), ")"));
  }
  const bool kind_ok = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
  MT_REQUIRE(kind_ok, flag, " ", path, " is ", type_of(st.st_mode), "; give a ",
             directory ? "directory" : "regular file");
  MT_REQUIRE(::access(path.c_str(), directory ? R_OK | X_OK : R_OK) == 0, flag, " ", path,
             " is not readable (", std::strerror(errno), ")");
}

}  // namespace

void require_input_file(const std::string& flag, const std::string& path) {
  require_input(flag, path, /*directory=*/false);
}

void require_input_dir(const std::string& flag, const std::string& path) {
  require_input(flag, path, /*directory=*/true);
}

void require_output_file(const std::string& flag, const std::string& path, bool allow_device) {
  MT_REQUIRE(!path.empty(), flag, " needs a file name (got an empty path)");
  MT_REQUIRE(path.back() != '/', flag, " ", path, " names a directory; give a file name");
  struct stat st {};
  if (stat_path(path, st)) {
    const bool ok = S_ISREG(st.st_mode) || (allow_device && S_ISCHR(st.st_mode));
    MT_REQUIRE(ok, flag, " ", path, " is ", type_of(st.st_mode), "; give a file name to write");
  } else {
    require_missing_is_absence(flag, path, errno);
  }
  require_writable_parent(flag, path);
}

void require_output_dir(const std::string& flag, const std::string& path) {
  MT_REQUIRE(!path.empty(), flag, " needs a directory name (got an empty path)");
  struct stat st {};
  if (stat_path(path, st)) {
    MT_REQUIRE(S_ISDIR(st.st_mode), flag, " ", path, " is ", type_of(st.st_mode),
               "; give a directory (it is created if missing)");
  } else {
    require_missing_is_absence(flag, path, errno);
  }
  require_writable_parent(flag, path);
}

}  // namespace mt
