// Issue #26: clean-up deletes only what it can prove meshtrain made (core/temp_marker.h), and
// publish_dir_atomic marks every temporary it makes, from its first moment to its last.
#include "core/temp_marker.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "test_util/temp_dir.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

TEST(TempMarker, ValidOnlyInTheDirectoryItNames) {
  TempDir t;
  const std::string ours = t / "ck.tmp-Ab12Cd";
  create_marked_dir(ours);
  EXPECT_TRUE(is_marked_temporary(ours));
  // A user's copy under another name carries a marker naming someone else.
  fs::copy(ours, t / "ck.old-backup", fs::copy_options::recursive);
  EXPECT_FALSE(is_marked_temporary(t / "ck.old-backup"));
  EXPECT_FALSE(remove_if_marked_temporary(t / "ck.old-backup"));
  EXPECT_TRUE(fs::exists(t / "ck.old-backup"));
  // No marker, or a FIFO in its place (never read: no hang): not proof.
  fs::create_directory(t / "ck.tmp-before");
  EXPECT_FALSE(is_marked_temporary(t / "ck.tmp-before"));
  fs::create_directory(t / "ck.tmp-fifo");
  ASSERT_EQ(::mkfifo((t / "ck.tmp-fifo/.meshtrain-temporary").c_str(), 0600), 0);
  EXPECT_FALSE(is_marked_temporary(t / "ck.tmp-fifo"));
  // Marked for the name it is about to get: proof only once it has that name.
  fs::create_directory(t / "step_000001");
  mark_temporary(t / "step_000001", "step_000001.tmp");
  EXPECT_FALSE(is_marked_temporary(t / "step_000001"));
  fs::rename(t / "step_000001", t / "step_000001.tmp");
  EXPECT_TRUE(remove_if_marked_temporary(t / "step_000001.tmp"));
  EXPECT_FALSE(fs::exists(t / "step_000001.tmp"));
  EXPECT_TRUE(remove_if_marked_temporary(ours));
}

// The temporary holds the marker while it is filled (a crash then leaves a provable
// leftover); the published directory does not keep it; the replaced copy is gone.
TEST(TempMarker, PublishDirAtomicMarksItsTemporaries) {
  TempDir t;
  const std::string dir = t / "ck";
  bool marked_while_filled = false;
  publish_dir_atomic(dir, [&](const std::string& tmp) {
    marked_while_filled = is_marked_temporary(tmp);
    std::ofstream(tmp + "/a") << "1";
  });
  EXPECT_TRUE(marked_while_filled);
  EXPECT_FALSE(fs::exists(dir + "/" + kTempMarkerFile));
  publish_dir_atomic(dir, [&](const std::string& tmp) { std::ofstream(tmp + "/a") << "2"; });
  EXPECT_FALSE(fs::exists(dir + "/" + kTempMarkerFile));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(t.path)) ++entries;
  EXPECT_EQ(entries, 1);  // only ck: no temporary, no old copy
}

}  // namespace
}  // namespace mt
