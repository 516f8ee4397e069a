// A fresh, uniquely named directory under the system temp dir for one test, removed with
// everything in it when the object goes out of scope.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace mt::test_util {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "meshtrain-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;  // a test that failed half-way must not throw from here
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace mt::test_util
