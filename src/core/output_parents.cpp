#include "core/output_parents.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "core/file_checks.h"

namespace mt {

void create_parent_directories(const std::string& path) {
  const std::string dir = parent_directory(path);
  std::error_code ec;
  // Also true for a directory another process made in between (the call tolerates that).
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw RuntimeError(
        str("cannot create directory ", dir, " for ", path, " (", ec.message(), ")"));
}

}  // namespace mt
