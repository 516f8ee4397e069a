#include "core/input_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "test_util/temp_dir.h"
#include "test_util/usage_error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

std::string usage_error_of(const std::string& path, uint64_t limit = 1 << 20) {
  return test_util::usage_error_of([&] { read_input_file("--thing", path, limit); });
}

TEST(InputFile, ReadsARegularFileWhole) {
  TempDir tmp;
  std::ofstream(tmp / "a.json", std::ios::binary) << std::string("{\"a\":\0 1}", 9);
  EXPECT_EQ(read_input_file("--thing", tmp / "a.json", 100), std::string("{\"a\":\0 1}", 9));
}

TEST(InputFile, RefusesAFifoWithoutBlocking) {
  TempDir tmp;
  const std::string fifo = tmp / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  const std::string err = usage_error_of(fifo);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(err.find("--thing"), std::string::npos) << err;
  EXPECT_NE(err.find("FIFO"), std::string::npos) << err;
}

TEST(InputFile, RefusesDirectoriesAndDevices) {
  TempDir tmp;
  EXPECT_NE(usage_error_of(tmp.path.string()).find("a directory"), std::string::npos);
  EXPECT_NE(usage_error_of("/dev/null").find("a device"), std::string::npos);
}

TEST(InputFile, RefusesAFileOverTheLimitBeforeReadingIt) {
  TempDir tmp;
  std::ofstream(tmp / "big") << std::string(101, 'x');
  const std::string err = usage_error_of(tmp / "big", 100);
  EXPECT_NE(err.find("101 bytes, over the limit of 100"), std::string::npos) << err;
  EXPECT_EQ(read_input_file("--thing", tmp / "big", 101).size(), 101u);
}

TEST(InputFile, NamesMissingFilesAndSymlinkLoopsApart) {
  TempDir tmp;
  EXPECT_NE(usage_error_of(tmp / "nope").find("does not exist"), std::string::npos);
  fs::create_symlink(tmp / "loop_b", tmp / "loop_a");
  fs::create_symlink(tmp / "loop_a", tmp / "loop_b");
  const std::string err = usage_error_of(tmp / "loop_a");
  EXPECT_NE(err.find("symlink loop"), std::string::npos) << err;
  EXPECT_EQ(err.find("does not exist"), std::string::npos) << err;
}

}  // namespace
}  // namespace mt
