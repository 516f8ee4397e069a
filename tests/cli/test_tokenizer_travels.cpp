// The tokenizer travels with the weights (issue #31, item 6): checkpoints and exports carry
// the SentencePiece model itself, so a run's outputs moved elsewhere still sample after the
// dataset's tokenizer file is gone.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_fixture.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace fs = std::filesystem;

namespace mt::testing {
namespace {

std::string corpus_text() {
  std::string t;
  for (int i = 0; i < 120; ++i)
    t += "Fortune " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog " +
         std::string(size_t(i % 5), '!') + "\n%\n";
  return t;
}

TEST(TokenizerTravels, MovedOutputsSampleWithoutTheTokenizerFile) {
  TempDir dir;
  std::ofstream(dir / "corpus.txt") << corpus_text();
  const std::string ds = dir / "ds", run = dir / "run";
  ASSERT_EQ(run_meshtrain("prepare " + (dir / "corpus.txt") + " --out " + ds +
                          " --documents separator --tokenizer bpe --vocab-size 400 --quiet")
                .exit_code,
            0);
  fs::create_directory(run);
  const std::string tiny =
      "train --layers 1 --dim 16 --heads 2 --seq 16 --batch 2 --steps 2 "
      "--quiet --data " +
      ds;
  ASSERT_EQ(
      run_meshtrain(tiny + " --save " + run + "/ck --export " + run + "/w.safetensors").exit_code,
      0);
  ASSERT_EQ(
      run_meshtrain(tiny + " --checkpoint-format sharded --save " + run + "/sharded").exit_code, 0);
  // The outputs move; the dataset's tokenizer is deleted.
  const std::string moved = dir / "elsewhere";
  fs::rename(run, moved);
  ASSERT_TRUE(fs::remove(ds + "/tokenizer.model"));
  // A checkpoint converted after the move carries the tokenizer on.
  ASSERT_EQ(run_meshtrain("export --from " + moved + "/sharded --to " + moved + "/e.safetensors")
                .exit_code,
            0);
  for (const std::string& from :
       {"--load " + moved + "/ck", "--load " + moved + "/sharded",
        "--init-from " + moved + "/w.safetensors", "--init-from " + moved + "/e.safetensors"}) {
    const RunResult r = run_meshtrain("sample " + from + " --tokens 6 --prompt Fortune");
    EXPECT_EQ(r.exit_code, 0) << from << ": " << r.err;
    EXPECT_EQ(r.out.rfind("Fortune", 0), 0u) << from << ": " << r.out;
  }
  // A damaged embedded model is named, not silently replaced by whatever file is at the path.
  const std::string w = moved + "/w.safetensors";
  std::fstream f(w, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const size_t at = bytes.find("\"tokenizer.model\":\"");
  ASSERT_NE(at, std::string::npos);
  const size_t flip = at + 40;
  f.seekp(std::streamoff(flip));
  f.put(bytes[flip] == 'A' ? 'B' : 'A');
  f.close();
  expect_usage_error(run_meshtrain("sample --init-from " + w + " --tokens 2"),
                     "embedded tokenizer");
}

}  // namespace
}  // namespace mt::testing
