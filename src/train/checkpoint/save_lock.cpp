#include "train/checkpoint/save_lock.h"

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
#include "core/output_parents.h"
#include "core/temp_marker.h"

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
  create_parent_directories(path_);  // beside a --save DIR whose parents may not exist yet
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

StaleTemporaries SaveDirLock::remove_stale_temporaries() {
  StaleTemporaries out;
  const fs::path dir(dir_);
  fs::path parent = dir.parent_path();
  if (parent.empty()) parent = ".";
  const std::string base = dir.filename().string();
  std::error_code ec;
  const bool dir_exists = fs::exists(fs::symlink_status(dir, ec));
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_temporary_of(name, base)) continue;
    // A name is no proof: only a directory holding our marker under its own name is ours.
    if (!is_marked_temporary(e.path().string())) continue;
    // DIR missing and DIR.old-XXXXXX marked: a fallback swap was cut between its two
    // renames, and this is the previous checkpoint. It is the user's to restore.
    if (!dir_exists && name.compare(base.size(), 5, ".old-") == 0) {
      out.kept.push_back(str(e.path().string(),
                             " holds the checkpoint an interrupted save moved "
                             "aside; rename it to ",
                             dir_, " to use it"));
      continue;
    }
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) out.removed.push_back(e.path().string());
  }
  return out;
}

}  // namespace mt
