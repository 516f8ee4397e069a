// `meshtrain prepare` and the tokenizer travelling with a run, through the binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_fixture.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace mt::testing {
namespace {

// Fortune-like text with enough documents for a split and a small BPE vocabulary.
std::string corpus_text() {
  std::string t;
  for (int i = 0; i < 120; ++i)
    t += "Fortune " + std::to_string(i) +
         ": the quick brown fox jumps over the lazy dog, w\xC3\xB6rld " +
         std::string(size_t(i % 5), '!') + "\n%\n";
  return t;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

const char* kTiny = " --layers 1 --dim 16 --heads 2 --seq 16 --batch 2 --steps 4 --quiet ";
const char* kTinyLoud = " --layers 1 --dim 16 --heads 2 --seq 16 --batch 2 --steps 4 ";

TEST(PrepareCommand, StdinToBpeDatasetThenTrainSampleAndReport) {
  TempDir dir;
  write(dir / "corpus.txt", corpus_text());
  const std::string ds = dir / "ds";
  // In a subshell: run_command gives the whole command line stdin /dev/null.
  RunResult p = run_command(
      "(cat '" + (dir / "corpus.txt") + "' | " + MESHTRAIN_BIN + " prepare - --out " + ds +
      " --documents separator --tokenizer bpe --vocab-size 400 --val-fraction 0.2)");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.out.find("tokenizer bpe"), std::string::npos) << p.out;
  EXPECT_TRUE(std::filesystem::exists(ds + "/tokenizer.model"));
  const std::string metrics = dir / "m.jsonl";
  RunResult t =
      run_meshtrain(std::string("train") + kTinyLoud + "--data " + ds +
                    " --eval-every 2 --eval-batches 1 --metrics " + metrics + " --export " +
                    (dir / "w.safetensors") + " --sample-tokens 20 --prompt Fortune");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("bpe tokenizer"), std::string::npos) << t.out;
  const std::string m = slurp(metrics);
  EXPECT_NE(m.find("\"event\":\"run\""), std::string::npos);
  EXPECT_NE(m.find("\"loss_per_byte\""), std::string::npos);
  EXPECT_NE(m.find("\"val_loss_per_byte\""), std::string::npos);
  EXPECT_NE(m.find("\"val_bytes_per_token\""), std::string::npos);
  // The page beside the metrics, written at the end of the run.
  EXPECT_NE(slurp(dir / "m.html").find("chart-loss-per-byte"), std::string::npos);
  // The export records the tokenizer, so sample decodes with it.
  RunResult s = run_meshtrain("sample --init-from " + (dir / "w.safetensors") +
                              " --tokens 10 --prompt Fortune");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(s.out.rfind("Fortune", 0), 0u) << s.out;
  // A moved model file can be named; another file is refused.
  std::filesystem::copy_file(ds + "/tokenizer.model", dir / "moved.model");
  EXPECT_EQ(run_meshtrain("sample --init-from " + (dir / "w.safetensors") +
                          " --tokens 3 --tokenizer " + (dir / "moved.model"))
                .exit_code,
            0);
  write(dir / "other.model", "not it");
  expect_usage_error(run_meshtrain("sample --init-from " + (dir / "w.safetensors") +
                                   " --tokens 3 --tokenizer " + (dir / "other.model")),
                     "is not the one");
}

TEST(PrepareCommand, TokenizerMismatchesAreRefused) {
  TempDir dir;
  write(dir / "corpus.txt", corpus_text());
  const std::string bpe = dir / "bpe", bytes = dir / "bytes";
  ASSERT_EQ(run_meshtrain("prepare " + (dir / "corpus.txt") + " --out " + bpe +
                          " --documents separator --tokenizer bpe --vocab-size 400 --quiet")
                .exit_code,
            0);
  ASSERT_EQ(run_meshtrain("prepare " + (dir / "corpus.txt") + " --out " + bytes +
                          " --documents separator --quiet")
                .exit_code,
            0);
  ASSERT_EQ(run_meshtrain(std::string("train") + kTiny + "--data " + bytes + " --export " +
                          (dir / "bytes.safetensors") + " --save " + (dir / "ck"))
                .exit_code,
            0);
  // A checkpoint records it too: resuming on BPE ids is refused, sampling from it decodes.
  expect_usage_error(run_meshtrain(std::string("train") + kTiny + "--steps 6 --data " + bpe +
                                   " --vocab 256 --load " + (dir / "ck")),
                     "trained on ids of tokenizer byte");
  EXPECT_EQ(run_meshtrain("sample --load " + (dir / "ck") + " --tokens 5").exit_code, 0);
  // A sharded checkpoint records it in its manifest, and its consolidated export carries it.
  ASSERT_EQ(run_meshtrain(std::string("train") + kTiny + "--data " + bytes +
                          " --checkpoint-format sharded --save " + (dir / "sharded"))
                .exit_code,
            0);
  const std::string newest = dir / "sharded" + "/" + step_dir_name(4);  // kTiny: --steps 4
  expect_usage_error(run_meshtrain(std::string("train") + kTiny + "--steps 6 --data " + bpe +
                                   " --vocab 256 --load " + newest),
                     "trained on ids of tokenizer byte");
  ASSERT_EQ(run_meshtrain("export --from " + newest + " --to " + (dir / "from_shards.safetensors"))
                .exit_code,
            0);
  expect_usage_error(run_meshtrain(std::string("train") + kTiny + "--data " + bpe +
                                   " --vocab 256 --init-from " + (dir / "from_shards.safetensors")),
                     "trained on ids of tokenizer byte");
  // Weights of the byte tokenizer continued on BPE ids: other text, refused.
  expect_usage_error(run_meshtrain(std::string("train") + kTiny + "--data " + bpe +
                                   " --vocab 256 --init-from " + (dir / "bytes.safetensors")),
                     "trained on ids of tokenizer byte");
  // Validation data of another tokenizer.
  expect_usage_error(
      run_meshtrain(std::string("train") + kTiny + "--data " + bpe + " --val-data " + bytes),
      "their ids mean different text");
  // A tokenizer file changed after the shards were made.
  write(bpe + "/tokenizer.model", "tampered");
  expect_usage_error(run_meshtrain(std::string("train") + kTiny + "--data " + bpe), "has changed");
  // A directory that is not a dataset.
  std::filesystem::create_directories(dir / "plain");
  expect_usage_error(run_meshtrain(std::string("train") + kTiny + "--data " + (dir / "plain")),
                     "not a dataset");
}

TEST(PrepareCommand, BadInputIsOneLineExit2) {
  TempDir dir;
  write(dir / "bin.dat", std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16));
  write(dir / "empty.txt", "");
  write(dir / "ok.txt", corpus_text());
  const std::string out = " --out " + (dir / "out") + " --quiet";
  expect_usage_error(run_meshtrain("prepare " + (dir / "bin.dat") + out), "is not text");
  expect_usage_error(run_meshtrain("prepare " + (dir / "missing.txt") + out), "does not exist");
  expect_usage_error(run_meshtrain("prepare " + (dir / "empty.txt") + out + " --val-fraction 0"),
                     "the corpus is empty");
  expect_usage_error(run_meshtrain("prepare" + out), "give the text to prepare");
  expect_usage_error(run_meshtrain("prepare " + (dir / "ok.txt") + out + " --documents lines"),
                     "--documents must be");
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
  // --input is the contract's spelling of the same inputs.
  RunResult ok =
      run_meshtrain("prepare --input " + (dir / "ok.txt") + out + " --documents separator");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(ReportCommand, OverlaysRunsAndRefusesToOverwriteAnInput) {
  TempDir dir;
  Fixture f;
  for (const char* name : {"a", "b"})
    ASSERT_EQ(run_meshtrain(f.base() + " --metrics " + (dir / name) + ".jsonl").exit_code, 0);
  RunResult r = run_meshtrain("report " + (dir / "a.jsonl") + " " + (dir / "b.jsonl") + " --out " +
                              (dir / "both.html"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string page = slurp(dir / "both.html");
  EXPECT_NE(page.find("a.jsonl"), std::string::npos);
  EXPECT_NE(page.find("b.jsonl"), std::string::npos);
  // Self-contained: nothing to fetch.
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  const std::string before = slurp(dir / "a.jsonl");
  expect_usage_error(run_meshtrain("report " + (dir / "a.jsonl") + " --out " + (dir / "a.jsonl")),
                     "would destroy it");
  EXPECT_EQ(slurp(dir / "a.jsonl"), before);
  write(dir / "junk.jsonl", "not json\n");
  expect_usage_error(run_meshtrain("report " + (dir / "junk.jsonl")), "holds no metrics records");
  expect_usage_error(run_meshtrain("report " + (dir / "nosuch.jsonl")), "does not exist");
}

}  // namespace
}  // namespace mt::testing
