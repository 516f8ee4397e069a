#include "core/file_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/input_file.h"

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

// ENOENT / ENOTDIR: nothing there, which an output may be. Anything else (a symlink loop,
// EACCES on a directory of the path) means we could not look, in the user's words.
bool is_absence(int err) {
  return err == ENOENT || err == ENOTDIR;
}

void require_missing_is_absence(const std::string& flag, const std::string& path, int err) {
  MT_REQUIRE(is_absence(err), flag, " ", path, " ", open_failure_reason(err));
}

// The directory an output goes into, or else its nearest existing ancestor (the writer
// creates the missing ones: core/output_parents.h), is a writable directory.
void require_writable_parent(const std::string& flag, const std::string& path) {
  std::string dir = parent_directory(path);
  struct stat st {};
  bool found = stat_path(dir, st);
  int err = found ? 0 : errno;
  while (!found && is_absence(err) && parent_directory(dir) != dir) {
    dir = parent_directory(dir);
    found = stat_path(dir, st);
    err = found ? 0 : errno;
  }
  MT_REQUIRE(found, flag, " ", path, ": directory ", dir, " ", open_failure_reason(err));
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

std::string absolute_form(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p =
      std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? path : p.string();
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
  MT_REQUIRE(stat_path(path, st), flag, " ", path, " ", open_failure_reason(errno));
  const bool kind_ok = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
  MT_REQUIRE(kind_ok, flag, " ", path, " is ", type_of(st.st_mode), "; give a ",
             directory ? "directory" : "regular file");
  MT_REQUIRE(::access(path.c_str(), directory ? R_OK | X_OK : R_OK) == 0, flag, " ", path, " ",
             open_failure_reason(errno));
}

}  // namespace

void require_input_file(const std::string& flag, const std::string& path) {
  require_input(flag, path, /*directory=*/false);
}

void require_input_dir(const std::string& flag, const std::string& path) {
  require_input(flag, path, /*directory=*/true);
}

void require_replaceable_file(const std::string& flag, const std::string& path) {
  struct stat st {};
  if (!stat_path(path, st)) return require_missing_is_absence(flag, path, errno);
  MT_REQUIRE(S_ISREG(st.st_mode), flag, " ", path, " is ", type_of(st.st_mode),
             S_ISDIR(st.st_mode) ? "; give a file name to write"
                                 : ", which writing it would replace with a regular file; give "
                                   "the name of a regular file to write");
}

void require_output_file(const std::string& flag, const std::string& path, OutputUse use) {
  MT_REQUIRE(!path.empty(), flag, " needs a file name (got an empty path)");
  MT_REQUIRE(path.back() != '/', flag, " ", path, " names a directory; give a file name");
  struct stat st {};
  if (use == OutputUse::replaced) {
    require_replaceable_file(flag, path);
  } else if (stat_path(path, st)) {
    // Written in place: a character device (/dev/null) takes the records and stays itself.
    MT_REQUIRE(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode), flag, " ", path, " is ",
               type_of(st.st_mode),
               "; give a regular file (or a character device such as /dev/null)");
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
