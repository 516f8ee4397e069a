#include "data/cache_dir.h"

#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;

namespace mt {

std::string meshtrain_cache_dir(const char* xdg_cache_home, const char* home) {
  fs::path cache;
  if (xdg_cache_home && xdg_cache_home[0] == '/') {
    cache = xdg_cache_home;
  } else if (home && home[0] != '\0') {
    cache = fs::path(home) / ".cache";
  } else {
    std::error_code ec;
    cache = fs::temp_directory_path(ec);
    if (ec) cache = "/tmp";
  }
  return (cache / "meshtrain").string();
}

std::string meshtrain_cache_dir() {
  return meshtrain_cache_dir(std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
}

}  // namespace mt
