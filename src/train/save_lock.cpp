#include "train/save_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "core/file_checks.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

std::string read_holder(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, size_t(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "another process" : s;
}

std::string describe_self() {
  char host[128] = {};
  ::gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = {};
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return str("meshtrain pid ", ::getpid(), " on ", host, ", started ", when, "\n");
}

// "ckpt.tmp-Ab12Cd": the sibling names mkdtemp gives publish_dir_atomic (core/atomic_file.h).
bool is_temporary_of(const std::string& name, const std::string& base) {
  for (const char* kind : {".tmp-", ".old-"}) {
    const std::string prefix = base + kind;
    if (name.size() == prefix.size() + 6 && name.compare(0, prefix.size(), prefix) == 0)
      return true;
  }
  return false;
}

}  // namespace

SaveDirLock::SaveDirLock(const std::string& dir)
    : dir_(strip_trailing_slashes(dir)), path_(dir_ + ".lock") {
  // Retry while the file we locked is not the one at the path (its holder removed it
  // between our open and our flock).
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw UsageError(str("--save ", dir_, ": cannot create the lock file ", path_, " (",
                           std::strerror(errno), ")"));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = read_holder(fd);
      ::close(fd);
      MT_REQUIRE(err != EWOULDBLOCK, "--save ", dir_, " is being written by another run (", holder,
                 "); wait for it to finish or give another --save directory");
      throw UsageError(
          str("--save ", dir_, ": cannot lock ", path_, " (", std::strerror(err), ")"));
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
      fd_ = fd;
      const std::string me = describe_self();
      if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
        // The holder's description is for messages only; the lock stands without it.
      }
      return;
    }
    ::close(fd);
  }
  throw UsageError(str("--save ", dir_, ": could not lock ", path_, " (it keeps changing)"));
}

SaveDirLock::~SaveDirLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: nobody can have taken it meanwhile
  ::close(fd_);
}

std::vector<std::string> SaveDirLock::remove_stale_temporaries() {
  std::vector<std::string> removed;
  const fs::path dir(dir_);
  fs::path parent = dir.parent_path();
  if (parent.empty()) parent = ".";
  const std::string base = dir.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_temporary_of(name, base) || !e.is_directory(ec)) continue;
    fs::remove_all(e.path(), ec);
    if (!ec) removed.push_back(e.path().string());
  }
  return removed;
}

}  // namespace mt
