// Inputs and outputs through the binary (issue #26): the report page is an output like the
// others, no reader waits on a FIFO, prepare reads only the user's text and names what it
// cannot read, and a report never costs a run its outputs. Each test failed on the code
// before the fix.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cli_fixture.h"

namespace fs = std::filesystem;

namespace mt::testing {
namespace {

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string corpus_text() {
  std::string t;
  for (int i = 0; i < 60; ++i)
    t += "Fortune " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog\n%\n";
  return t;
}

// `timeout` turns a hang into exit 124, which fails the exit-code checks.
RunResult run_bounded(const std::string& args) {
  return run_command("timeout 20 " + std::string(MESHTRAIN_BIN) + " " + args);
}

// Runs `args` as user nobody under `limits` (prlimit options), for what root is exempt
// from (permissions, process limits); "" when that cannot be arranged here.
std::string as_nobody(const std::string& limits = "") {
  if (::geteuid() != 0) return "";
  if (std::system("command -v setpriv >/dev/null && command -v prlimit >/dev/null") != 0) return "";
  return "setpriv --reuid=65534 --regid=65534 --clear-groups prlimit " + limits + " ";
}

TEST(DataSafety, TheReportPageIsCheckedLikeEveryOutput) {
  Fixture f;
  const std::string w = f.dir / "w.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --steps 1 --export " + w).exit_code, 0);
  // --metrics X.jsonl writes X.html: an --init-from X.html would be overwritten.
  fs::copy_file(w, f.dir / "X.html");
  const std::string before = slurp(f.dir / "X.html");
  expect_usage_error(run_meshtrain(f.base() + " --metrics " + (f.dir / "X.jsonl") +
                                   " --init-from " + (f.dir / "X.html")),
                     "is the same file as --init-from");
  EXPECT_EQ(slurp(f.dir / "X.html"), before);
  // A folder of that name is refused before step 1, not found at step 100.
  fs::create_directory(f.dir / "Y.html");
  const std::string longrun = "train" + f.tiny + "--steps 1000000 --data " + f.data;
  expect_usage_error(run_bounded(longrun + " --metrics " + (f.dir / "Y.jsonl")),
                     "Y.html is a directory");
  // Metrics to a device: no page beside it, nothing refused.
  EXPECT_EQ(run_meshtrain(f.base() + " --metrics /dev/null").exit_code, 0);
}

TEST(DataSafety, AReportFailureNeverLosesTheRun) {
  Fixture f;
  // No step records: the page says so; the export is written; exit 0.
  const std::string w = f.dir / "w.safetensors", m = f.dir / "m.jsonl";
  RunResult r = run_meshtrain(f.base() + " --steps 0 --metrics " + m + " --export " + w);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(w));
  EXPECT_NE(slurp(f.dir / "m.html").find("no-steps"), std::string::npos);
  // Resuming a finished run takes no step either.
  const std::string ck = f.dir / "ck", w2 = f.dir / "w2.safetensors";
  ASSERT_EQ(run_meshtrain(f.base() + " --save " + ck).exit_code, 0);
  r = run_meshtrain(f.base() + " --load " + ck + " --metrics " + (f.dir / "r.jsonl") +
                    " --export " + w2);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(w2));
}

TEST(DataSafety, ReportPrepareAndSampleReadersRefuseFifos) {
  Fixture f;
  TempDir& dir = f.dir;
  write(dir / "corpus.txt", corpus_text());
  const std::string ds = dir / "ds";
  ASSERT_EQ(run_meshtrain("prepare " + (dir / "corpus.txt") + " --out " + ds +
                          " --documents separator --tokenizer bpe --vocab-size 300 --quiet")
                .exit_code,
            0);
  const std::string w = dir / "w.safetensors";
  ASSERT_EQ(
      run_meshtrain(std::string("train") + f.tiny + "--steps 1 --data " + ds + " --export " + w)
          .exit_code,
      0);
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directory(dir / "run");
  ASSERT_EQ(::mkfifo((dir / "run/metrics.jsonl").c_str(), 0600), 0);
  // A dataset whose manifest is a FIFO, and one whose tokenizer model is.
  fs::copy(ds, dir / "ds_manifest");
  fs::remove(dir / "ds_manifest/manifest.json");
  ASSERT_EQ(::mkfifo((dir / "ds_manifest/manifest.json").c_str(), 0600), 0);
  fs::copy(ds, dir / "ds_model");
  fs::remove(dir / "ds_model/tokenizer.model");
  ASSERT_EQ(::mkfifo((dir / "ds_model/tokenizer.model").c_str(), 0600), 0);
  const std::string t = "train" + f.tiny + "--steps 1 --data ";
  for (const std::string& args :
       {"report " + fifo, "report " + (dir / "run"), t + (dir / "ds_manifest"),
        t + (dir / "ds_model"),
        "prepare " + (dir / "corpus.txt") + " --quiet --out " + (dir / "ds_manifest"),
        "sample --tokens 2 --init-from " + w + " --tokenizer " + fifo,
        "prepare " + (dir / "corpus.txt") + " --quiet --out " + (dir / "x") + " --tokenizer " +
            fifo})
    expect_usage_error(run_bounded(args), "FIFO");
}

// Writers in place waited on a FIFO forever; writers by rename replaced it.
TEST(DataSafety, EveryWriterRefusesAFifo) {
  Fixture f;
  const std::string m = f.dir / "m.jsonl", fifo = f.dir / "fifo";
  ASSERT_EQ(run_meshtrain(f.base() + " --metrics " + m).exit_code, 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& args :
       {"schedule --pp 2 --microbatches 4 --svg " + fifo, "report " + m + " --out " + fifo,
        f.base() + " --metrics " + fifo, f.base() + " --export " + fifo})
    expect_usage_error(run_bounded(args), "FIFO");
  struct stat st {};
  ASSERT_EQ(::stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(ReportCommand, OutIsCheckedBeforeAnythingIsRead) {
  Fixture f;
  const std::string m = f.dir / "m.jsonl";
  ASSERT_EQ(run_meshtrain(f.base() + " --metrics " + m).exit_code, 0);
  fs::create_directory(f.dir / "folder");
  expect_usage_error(run_meshtrain("report " + m + " --out " + (f.dir / "folder")),
                     "is a directory");
  expect_usage_error(run_meshtrain("report " + m + " --out " + m + "/no/such/p.html"),
                     "is a regular file, not a directory");
  // A device node is never replaced by a regular file (as root, --out /dev/null would be).
  const std::string null = f.dir / "null";
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) GTEST_SKIP() << "mknod: not root";
  expect_usage_error(run_meshtrain("report " + m + " --out " + null), "is a device");
  struct stat st {};
  ASSERT_EQ(::stat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(ReportCommand, CorruptRecordsAreExitTwoWithTheLine) {
  Fixture f;
  const std::string m = f.dir / "m.jsonl";
  ASSERT_EQ(run_meshtrain(f.base() + " --metrics " + m).exit_code, 0);
  const std::string good = slurp(m);
  for (const auto& [bad, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"event": 7})", "\"event\" is a number"},
           {R"({"event": "memory", "rank": "zero"})", "\"rank\" must be"},
           {R"({"step": 9, "loss": [1]})", "\"loss\" is an array"}}) {
    write(f.dir / "bad.jsonl", good + bad + "\n");
    const RunResult r = run_meshtrain("report " + (f.dir / "bad.jsonl"));
    expect_usage_error(r, says);
    EXPECT_NE(r.err.find("bad.jsonl line "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
  }
}

TEST(PrepareCommand, OwnOutputsInsideTheInputAreLeftOutNotRead) {
  TempDir dir;
  fs::create_directory(dir / "text");
  write(dir / "text/corpus.txt", corpus_text());
  const std::string ds = dir / "text/ds";
  const std::string prep = "prepare " + (dir / "text") + " --documents separator --out " + ds;
  RunResult first = run_meshtrain(prep + " --val-fraction 0");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string manifest = slurp(ds + "/manifest.json");
  // Again, into the same place: the earlier dataset is not text (its manifest would become
  // training data and its shards are binary).
  for (const char* extra : {"", " --skip-binary"}) {
    RunResult again = run_meshtrain(prep + " --val-fraction 0" + extra);
    ASSERT_EQ(again.exit_code, 0) << extra << again.err;
    EXPECT_NE(again.out.find("left out " + ds), std::string::npos) << again.out;
    EXPECT_EQ(slurp(ds + "/manifest.json"), manifest) << extra;
  }
  // A dataset given as the input is refused; so is a FIFO inside an input directory.
  expect_usage_error(run_meshtrain("prepare " + ds + " --out " + (dir / "other")),
                     "is a dataset written by meshtrain prepare");
  ASSERT_EQ(::mkfifo((dir / "text/pipe").c_str(), 0600), 0);
  expect_usage_error(run_bounded(prep), "pipe is a FIFO (named pipe) inside");
}

TEST(PrepareCommand, AnUnreadableSubfolderIsAnErrorNamingIt) {
  TempDir dir;
  const std::string nobody = as_nobody();
  if (::geteuid() == 0 && nobody.empty()) GTEST_SKIP() << "root reads everything; no setpriv";
  fs::permissions(dir.path, fs::perms::all);
  fs::create_directories(dir / "text/open");
  fs::create_directories(dir / "text/locked");
  write(dir / "text/open/a.txt", "readable\n");
  write(dir / "text/locked/b.txt", "secret\n");
  fs::permissions(dir / "text", fs::perms::all);
  fs::permissions(dir / "text/open", fs::perms::all);
  fs::permissions(dir / "text/open/a.txt", fs::perms::all);
  // Root reads everything: the run is made as nobody, and the folder is root's alone.
  fs::permissions(dir / "text/locked", ::geteuid() == 0 ? fs::perms::owner_all : fs::perms::none);
  const RunResult r = run_command(nobody + MESHTRAIN_BIN + " prepare " + (dir / "text") +
                                  " --quiet --out " + (dir / "ds"));
  fs::permissions(dir / "text/locked", fs::perms::owner_all);  // so TempDir can remove it
  expect_usage_error(r, "input directory " + (dir / "text/locked") + " is not readable");
  EXPECT_FALSE(fs::exists(dir / "ds"));
}

TEST(PrepareCommand, ThreadsAreCheckedAndAThreadLimitIsACleanError) {
  TempDir dir;
  write(dir / "corpus.txt", corpus_text());
  const std::string prep = "prepare " + (dir / "corpus.txt") + " --documents separator --out ";
  for (const char* n : {"0", "-1", "100000"})
    expect_usage_error(run_meshtrain(prep + (dir / "ds") + " --threads " + n),
                       "--threads must be in 1..256");
  // Encoding threads under a process limit: a clean error, nothing left behind.
  ASSERT_EQ(
      run_meshtrain(prep + (dir / "bpe") + " --tokenizer bpe --vocab-size 300 --quiet").exit_code,
      0);
  const std::string nobody = as_nobody("--nproc=3");
  if (nobody.empty()) GTEST_SKIP() << "cannot set a process limit here (needs root, setpriv)";
  fs::permissions(dir.path, fs::perms::all);
  fs::permissions(dir / "corpus.txt", fs::perms::all);
  fs::permissions(dir / "bpe", fs::perms::all);
  fs::permissions(dir / "bpe/tokenizer.model", fs::perms::all);
  for (const std::string& tokenizer : {dir / "bpe/tokenizer.model", std::string("bpe")}) {
    const RunResult r =
        run_command(nobody + MESHTRAIN_BIN + " " + prep + (dir / "ds") + " --quiet --threads 8 " +
                    "--tokenizer " + tokenizer + (tokenizer == "bpe" ? " --vocab-size 300" : ""));
    EXPECT_EQ(r.exit_code, 1) << tokenizer << ": " << r.err;
    EXPECT_NE(r.err.find("give a smaller --threads"), std::string::npos) << r.err;
    for (const auto& e : fs::directory_iterator(dir.path))
      EXPECT_EQ(e.path().filename().string().rfind("ds", 0), std::string::npos) << e.path();
  }
}

TEST(PrepareCommand, IgnoredOrImpossibleRequestsAreExitTwo) {
  TempDir dir;
  write(dir / "corpus.txt", corpus_text());
  write(dir / "file", "a file\n");
  const std::string prep = "prepare " + (dir / "corpus.txt") + " --out ";
  expect_usage_error(run_meshtrain(prep + (dir / "ds") + " --vocab-size 300"),
                     "--vocab-size 300 applies to a tokenizer prepare trains");
  expect_usage_error(run_meshtrain(prep + (dir / "ds") + " --tokenizer byte --vocab-size 300"),
                     "--tokenizer byte");
  expect_usage_error(run_meshtrain(prep + (dir / "file/ds")), "is a regular file, not a directory");
  expect_usage_error(run_meshtrain(prep + (dir / "file/a/b/ds")),
                     "is a regular file, not a directory");
  EXPECT_FALSE(fs::exists(dir / "ds"));
}

TEST(BadInput, SymlinkLoopsAreNamedAsSuch) {
  Fixture f;
  fs::create_symlink(f.dir / "loop_b", f.dir / "loop_a");
  fs::create_symlink(f.dir / "loop_a", f.dir / "loop_b");
  const std::string loop = f.dir / "loop_a";
  for (const std::string& args :
       {"prepare " + loop + " --out " + (f.dir / "ds"), "report " + loop,
        f.base() + " --export " + loop + "/w.safetensors", f.base() + " --metrics " + loop,
        f.base() + " --init-from " + loop}) {
    const RunResult r = run_meshtrain(args);
    expect_usage_error(r, "symlink loop");
    EXPECT_EQ(r.err.find("does not exist"), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace mt::testing
