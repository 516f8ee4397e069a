// Outputs just work (issue #31, item 3): every output path's missing folders are created,
// after the checks that keep the user's files safe (core/file_checks.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_fixture.h"
#include "run_binary.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using testing::expect_usage_error;
using testing::Fixture;
using testing::run_meshtrain;

TEST(OutputFolders, TrainCreatesTheFoldersOfEveryOutput) {
  Fixture f;
  const std::string d = f.dir / "new";
  const auto r =
      run_meshtrain(f.base() + " --metrics " + d + "/m/metrics.jsonl --trace " + d +
                    "/t/trace.json --save " + d + "/c/ck --export " + d + "/e/w.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* p : {"/m/metrics.jsonl", "/m/metrics.html", "/t/trace.json", "/c/ck/state.json",
                        "/e/w.safetensors"})
    EXPECT_TRUE(fs::is_regular_file(d + p)) << p;
  // Sharded checkpoints and a Hugging Face directory too.
  const auto s = run_meshtrain(f.base() + " --checkpoint-format sharded --save " + d +
                               "/s/ck --arch llama --export-hf " + d + "/h/hf");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_TRUE(fs::is_directory(d + "/s/ck/step_000002"));
  EXPECT_TRUE(fs::is_regular_file(d + "/h/hf/config.json"));
}

TEST(OutputFolders, TheOtherCommandsCreateThemToo) {
  Fixture f;
  const std::string d = f.dir / "new";
  ASSERT_EQ(run_meshtrain(f.base() + " --checkpoint-format sharded --save " + (f.dir / "ck") +
                          " --metrics " + (f.dir / "m.jsonl"))
                .exit_code,
            0);
  const std::string step = f.dir / "ck/step_000002";
  auto r = run_meshtrain("export --from " + step + " --to " + d + "/x/w.safetensors");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(d + "/x/w.safetensors"));
  r = run_meshtrain("report " + (f.dir / "m.jsonl") + " --out " + d + "/r/page.html");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(d + "/r/page.html"));
  r = run_meshtrain("schedule --pp 2 --microbatches 4 --svg " + d + "/s/s.svg");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(d + "/s/s.svg"));
  std::ofstream(f.dir / "text.txt") << "a few words of text\nand another line\n";
  r = run_meshtrain("prepare " + (f.dir / "text.txt") + " --quiet --val-fraction 0 --out " + d +
                    "/p/q/ds");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_directory(d + "/p/q/ds"));
}

TEST(OutputFolders, AFolderThatCannotBeMadeIsRefusedBeforeStepOne) {
  Fixture f;
  // A regular file where a folder would go: refused by name, nothing created.
  const std::string through = f.data + "/sub";
  for (const std::string& flag :
       {" --metrics " + through + "/m.jsonl", " --export " + through + "/w.safetensors",
        " --save " + through + "/ck", " --trace " + through + "/t.json"})
    expect_usage_error(run_meshtrain(f.base() + " --steps 1000000" + flag),
                       f.data + " is a regular file, not a directory");
}

}  // namespace
}  // namespace mt
