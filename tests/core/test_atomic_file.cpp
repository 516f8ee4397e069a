#include "core/atomic_file.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util/temp_dir.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

int count_entries(const fs::path& dir) {
  int n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(AtomicFile, WritesAndReplaces) {
  TempDir tmp;
  write_file_atomic(tmp / "a.txt", "first");
  EXPECT_EQ(slurp(tmp / "a.txt"), "first");
  write_file_atomic(tmp / "a.txt", std::string("second\0x", 8));
  EXPECT_EQ(slurp(tmp / "a.txt"), std::string("second\0x", 8));
  EXPECT_EQ(count_entries(tmp.path), 1);  // no temporaries left behind
}

TEST(AtomicFile, UncommittedLeavesTargetUntouched) {
  TempDir tmp;
  write_file_atomic(tmp / "a.txt", "old");
  {
    AtomicFile f(tmp / "a.txt");
    f.write("new", 3);
    EXPECT_TRUE(fs::exists(f.temp_path()));
  }  // destroyed without commit, as when an exception unwinds
  EXPECT_EQ(slurp(tmp / "a.txt"), "old");
  EXPECT_EQ(count_entries(tmp.path), 1);
}

// Outputs just work (issue #31): missing folders are made; one that cannot be (a regular
// file on the way) is a RuntimeError naming the path.
TEST(AtomicFile, MakesMissingFoldersAndNamesOneItCannotMake) {
  TempDir tmp;
  write_file_atomic(tmp / "no/such/dir/file.bin", "x");
  EXPECT_EQ(slurp(tmp / "no/such/dir/file.bin"), "x");
  std::string target = tmp / "no/such/dir/file.bin/below/file.bin";
  try {
    write_file_atomic(target, "x");
    FAIL() << "expected RuntimeError";
  } catch (const RuntimeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(target), std::string::npos) << msg;
    EXPECT_NE(msg.find("Not a directory"), std::string::npos) << msg;
  }
}

TEST(PublishDir, CreatesThenReplacesWholeDirectory) {
  TempDir tmp;
  std::string dir = tmp / "ckpt";
  publish_dir_atomic(dir, [](const std::string& d) {
    write_file_atomic(d + "/a", "1");
    write_file_atomic(d + "/only_in_old", "x");
  });
  EXPECT_EQ(slurp(dir + "/a"), "1");
  publish_dir_atomic(dir + "/", [](const std::string& d) {
    fs::create_directories(d + "/sub");
    std::ofstream(d + "/sub/b") << "2";  // plain writes are enough inside the temp dir
    write_file_atomic(d + "/a", "new");
  });
  EXPECT_EQ(slurp(dir + "/a"), "new");
  EXPECT_EQ(slurp(dir + "/sub/b"), "2");
  EXPECT_FALSE(fs::exists(dir + "/only_in_old"));  // replaced, not merged
  EXPECT_EQ(count_entries(tmp.path), 1);           // old copy and temporaries removed
}

TEST(PublishDir, FailedFillKeepsOldDirectory) {
  TempDir tmp;
  std::string dir = tmp / "ckpt";
  publish_dir_atomic(dir, [](const std::string& d) { write_file_atomic(d + "/a", "good"); });
  EXPECT_THROW(publish_dir_atomic(dir,
                                  [](const std::string& d) {
                                    write_file_atomic(d + "/a", "half");
                                    throw RuntimeError("disk full");
                                  }),
               RuntimeError);
  EXPECT_EQ(slurp(dir + "/a"), "good");
  EXPECT_EQ(count_entries(tmp.path), 1);
}

TEST(PublishDir, RefusesToReplaceAFile) {
  TempDir tmp;
  std::string dir = tmp / "ckpt";
  write_file_atomic(dir, "user data");
  try {
    publish_dir_atomic(dir, [](const std::string&) {});
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a directory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(dir), "user data");
  EXPECT_EQ(count_entries(tmp.path), 1);
}

}  // namespace
}  // namespace mt
