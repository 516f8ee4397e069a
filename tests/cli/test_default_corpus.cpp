// `train` without --data prepares the embedded corpus in the user's cache folder: the folder
// it is started in receives nothing it was not asked for (issue #31).
#include <gtest/gtest.h>

#include <filesystem>

#include "run_binary.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using testing::run_command;
using testing::TempDir;

TEST(DefaultCorpus, PreparedInTheCacheFolderNotTheWorkingDirectory) {
  TempDir tmp;
  const fs::path cwd = tmp / "cwd";
  const fs::path cache = tmp / "cache";
  fs::create_directories(cwd);
  auto r = run_command("XDG_CACHE_HOME='" + cache.string() + "' " + MESHTRAIN_BIN +
                           " train --layers 1 --dim 16 --heads 2 --seq 16 --batch 2 --steps 1"
                           " --eval-every 0 --sample-tokens 0 --quiet",
                       cwd.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_empty(cwd)) << "train wrote into its working directory: "
                                 << fs::directory_iterator(cwd)->path();
  EXPECT_TRUE(fs::is_regular_file(cache / "meshtrain" / "fortunes" / "train.bin"));
  EXPECT_TRUE(fs::is_regular_file(cache / "meshtrain" / "fortunes" / "manifest.json"));
}

}  // namespace
}  // namespace mt
