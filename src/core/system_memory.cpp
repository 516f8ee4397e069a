#include "core/system_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace mt {

namespace {

// The first number of a one-line file; -1 if absent or not a number ("max").
int64_t read_number(const std::string& path) {
  std::ifstream in(path);
  int64_t v = -1;
  if (!(in >> v)) return -1;
  return v;
}

int64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream fields(line.substr(13));
      int64_t kib = -1;
      if (fields >> kib) return kib * 1024;
    }
  return -1;
}

// This process's cgroup v2 directory ("0::/path" in /proc/self/cgroup), or "" (cgroup v1).
std::string own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return "";
}

}  // namespace

int64_t available_memory_bytes() {
  int64_t best = meminfo_available();
  // Every level of the hierarchy may limit; the tightest headroom wins. Inside a container
  // the namespace makes our own cgroup appear as "/", i.e. /sys/fs/cgroup itself.
  std::string dir = own_cgroup();
  while (!dir.empty()) {
    const std::string base = "/sys/fs/cgroup" + (dir == "/" ? std::string() : dir);
    const int64_t max = read_number(base + "/memory.max"),
                  cur = read_number(base + "/memory.current");
    if (max >= 0 && cur >= 0) {
      const int64_t room = std::max<int64_t>(0, max - cur);
      best = best < 0 ? room : std::min(best, room);
    }
    if (dir == "/") break;
    const size_t slash = dir.rfind('/');
    dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
  }
  return best;
}

}  // namespace mt
