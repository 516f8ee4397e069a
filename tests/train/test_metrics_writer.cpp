// MetricsWriter: a fresh run starts the file; a run resumed after step S continues it.
#include "train/metrics.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

struct TempFile {
  fs::path path;
  explicit TempFile(const std::string& name)
      : path(fs::temp_directory_path() / (name + "." + std::to_string(::getpid()))) {}
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
  void write(const std::string& text) const { std::ofstream(path, std::ios::binary) << text; }
  std::string read() const {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

const std::string kEarlierRun =
    "{\"event\":\"run\",\"backend\":\"local\"}\n"
    "{\"step\":1,\"loss\":5.5}\n"
    "{\"event\":\"memory\",\"rank\":0}\n"
    "{\"step\":2,\"loss\":5.4}\n"
    "a note the user added\n"
    "{\"step\":3,\"loss\":5.3}\n"
    "{\"step\":4,\"loss\":5.2,\"val_loss\":5.25}\n"
    "{\"step\":5,\"lo";  // torn: the crash cut this record off mid-write

TEST(MetricsWriter, AFreshRunStartsTheFileOver) {
  TempFile f("metrics_fresh.jsonl");
  f.write(kEarlierRun);
  {
    MetricsWriter w(f.path.string());
    w.write({{"step", 1}, {"loss", 6.0}});
  }
  EXPECT_EQ(f.read(), "{\"loss\":6.0,\"step\":1}\n");
}

TEST(MetricsWriter, AResumedRunKeepsTheStepsUpToItsCheckpoint) {
  TempFile f("metrics_resumed.jsonl");
  f.write(kEarlierRun);
  {
    MetricsWriter w(f.path.string(), /*resumed_after=*/2);
    w.write({{"event", "run"}});
    w.write({{"step", 3}, {"loss", 5.0}});
  }
  EXPECT_EQ(f.read(),
            "{\"event\":\"run\",\"backend\":\"local\"}\n"
            "{\"step\":1,\"loss\":5.5}\n"
            "{\"step\":2,\"loss\":5.4}\n"
            "a note the user added\n"
            "{\"event\":\"run\"}\n"
            "{\"loss\":5.0,\"step\":3}\n");
  EXPECT_FALSE(fs::exists(f.path.string() + ".continue.tmp"));
}

TEST(MetricsWriter, ResumingPastEveryRecordKeepsAllButTheTornLine) {
  TempFile f("metrics_all.jsonl");
  f.write(kEarlierRun);
  { MetricsWriter w(f.path.string(), /*resumed_after=*/4); }
  const std::string kept = f.read();
  EXPECT_NE(kept.find("\"val_loss\":5.25}\n"), std::string::npos) << kept;
  EXPECT_EQ(kept.find("\"lo\n"), std::string::npos) << kept;
  EXPECT_EQ(kept.find("memory"), std::string::npos) << kept;
}

// --metrics through a symbolic link: the file it names is continued, the link stays a link.
TEST(MetricsWriter, AResumedRunThroughALinkContinuesTheFileItNames) {
  TempFile f("metrics_target.jsonl"), link("metrics_link.jsonl");
  f.write(kEarlierRun);
  fs::create_symlink(f.path, link.path);
  {
    MetricsWriter w(link.path.string(), /*resumed_after=*/1);
    w.write({{"step", 2}});
  }
  EXPECT_TRUE(fs::is_symlink(link.path));
  EXPECT_EQ(f.read(),
            "{\"event\":\"run\",\"backend\":\"local\"}\n{\"step\":1,\"loss\":5.5}\n"
            "a note the user added\n{\"step\":2}\n");
}

// The rewrite of a resumed file went through PATH.continue.tmp, a name the user may own.
TEST(MetricsWriter, AResumedRunBorrowsNoNameOfTheUser) {
  TempFile f("metrics_borrow.jsonl");
  const fs::path users = f.path.string() + ".continue.tmp";
  std::ofstream(users) << "the user's notes\n";
  f.write(kEarlierRun);
  { MetricsWriter w(f.path.string(), /*resumed_after=*/1); }
  std::ifstream in(users);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "the user's notes\n");
  fs::remove(users);
}

TEST(MetricsWriter, AResumedRunWithoutAFileStartsOne) {
  TempFile f("metrics_new.jsonl");
  {
    MetricsWriter w(f.path.string(), /*resumed_after=*/7);
    w.write({{"step", 8}});
  }
  EXPECT_EQ(f.read(), "{\"step\":8}\n");
}

TEST(MetricsWriter, ADeviceIsWrittenAsItIs) {
  MetricsWriter w("/dev/null", /*resumed_after=*/3);
  EXPECT_FALSE(w.is_regular_file());
  EXPECT_NO_THROW(w.write({{"step", 4}}));
}

// Opening a FIFO for writing waited for a reader, forever.
TEST(MetricsWriter, AFifoIsRefusedNotWaitedOn) {
  TempFile f("metrics_fifo.jsonl");
  ASSERT_EQ(::mkfifo(f.path.c_str(), 0600), 0);
  EXPECT_THROW(MetricsWriter(f.path.string()), UsageError);
}

// A missing folder is made (issue #31); one that cannot be, with a file on the way, is an
// error (the CLI's checks refuse it first, as bad usage).
TEST(MetricsWriter, AFolderThatCannotBeMadeIsAnError) {
  TempFile f("metrics_not_a_folder");
  std::ofstream(f.path) << "x";
  EXPECT_THROW(MetricsWriter(f.path.string() + "/sub/m.jsonl"), RuntimeError);
}

}  // namespace
}  // namespace mt
