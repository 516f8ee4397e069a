#include "data/corpus.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include "test_util/temp_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/token_shard.h"

namespace fs = std::filesystem;

namespace mt {
namespace {

using test_util::TempDir;

std::string shard_text(const std::string& path) {
  std::vector<uint32_t> t = read_token_shard(path);
  return std::string(t.begin(), t.end());
}

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A fake package directory: two fortune files plus the index/symlink files to skip.
std::string fake_source(const TempDir& tmp, int n_per_file = 10) {
  std::string dir = tmp / "src";
  fs::create_directories(dir);
  for (std::string name : {"alpha", "beta"}) {
    std::ofstream out(dir + "/" + name);
    for (int i = 0; i < n_per_file; ++i) out << name << " fortune " << i << "\n  line two\n%\n";
  }
  std::ofstream(dir + "/alpha.dat") << "binary index";
  fs::create_symlink("alpha", dir + "/alpha.u8");
  return dir;
}

TEST(Corpus, SplitFortunes) {
  std::string text = "one\n%\ntwo\n\nlines  \n%\n%\n  \n%\nlast without terminator";
  EXPECT_EQ(split_fortunes(text),
            (std::vector<std::string>{"one\n", "two\n\nlines\n", "last without terminator\n"}));
  EXPECT_EQ(split_fortunes("a\r\n%\r\nb\r\n"), (std::vector<std::string>{"a\n", "b\n"}));
  EXPECT_EQ(split_fortunes("100%\n% \nx\n"), (std::vector<std::string>{"100%\n% \nx\n"}));
  EXPECT_EQ(join_fortunes({"a\n", "b c\n"}), "a\n%\nb c\n%\n");
}

TEST(Corpus, PreparesDeterministicPartition) {
  TempDir tmp;
  std::string src = fake_source(tmp);
  CorpusFiles a = prepare_fortunes_corpus(tmp / "out_a", 0.2, src);
  CorpusFiles b = prepare_fortunes_corpus(tmp / "out_b", 0.2, src);
  EXPECT_TRUE(a.rebuilt);
  EXPECT_EQ(a.fortunes, 20);
  EXPECT_EQ(slurp(a.train_path), slurp(b.train_path));
  EXPECT_EQ(slurp(a.val_path), slurp(b.val_path));

  std::vector<std::string> val = split_fortunes(shard_text(a.val_path));
  std::vector<std::string> train = split_fortunes(shard_text(a.train_path));
  EXPECT_EQ(val.size(), 4u);
  EXPECT_EQ(train.size(), 16u);
  EXPECT_EQ(a.val_tokens, static_cast<int64_t>(shard_text(a.val_path).size()));
  // Together they hold each fortune exactly once, in a shuffled (not file) order.
  std::vector<std::string> all = train;
  all.insert(all.end(), val.begin(), val.end());
  std::vector<std::string> want;
  for (std::string name : {"alpha", "beta"})
    for (int i = 0; i < 10; ++i)
      want.push_back(name + " fortune " + std::to_string(i) + "\n  line two\n");
  EXPECT_NE(all, want);
  std::sort(all.begin(), all.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(all, want);
  EXPECT_EQ(shard_text(a.val_path).back(), '\n');
}

TEST(Corpus, RebuildsOnlyWhenStale) {
  TempDir tmp;
  std::string src = fake_source(tmp);
  std::string out = tmp / "out";
  EXPECT_TRUE(prepare_fortunes_corpus(out, 0.2, src).rebuilt);
  auto mtime = fs::last_write_time(out + "/train.bin");
  EXPECT_FALSE(prepare_fortunes_corpus(out, 0.2, src).rebuilt);
  EXPECT_EQ(fs::last_write_time(out + "/train.bin"), mtime);

  EXPECT_TRUE(prepare_fortunes_corpus(out, 0.25, src).rebuilt);  // parameters changed
  std::ofstream(src + "/beta", std::ios::app) << "a new fortune\n%\n";
  CorpusFiles f = prepare_fortunes_corpus(out, 0.25, src);  // source changed
  EXPECT_TRUE(f.rebuilt);
  EXPECT_EQ(f.fortunes, 21);
  fs::resize_file(out + "/val.bin", 1030);  // damaged shard
  EXPECT_TRUE(prepare_fortunes_corpus(out, 0.25, src).rebuilt);
  fs::remove(out + "/manifest.json");
  EXPECT_TRUE(prepare_fortunes_corpus(out, 0.25, src).rebuilt);
}

TEST(Corpus, MissingPackage) {
  TempDir tmp;
  std::string out = tmp / "out";
  try {
    prepare_fortunes_corpus(out, 0.1, tmp / "no-fortunes-here");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("apt-get install fortunes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no-fortunes-here"), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(out + "/train.bin"));
  // Shards prepared earlier stay usable after the package is removed.
  prepare_fortunes_corpus(out, 0.1, fake_source(tmp));
  CorpusFiles f = prepare_fortunes_corpus(out, 0.1, tmp / "no-fortunes-here");
  EXPECT_FALSE(f.rebuilt);
  EXPECT_EQ(f.fortunes, 20);
  EXPECT_THROW(prepare_fortunes_corpus(out, 0.0, tmp / "src"), UsageError);
  EXPECT_THROW(prepare_fortunes_corpus(out, 1.0, tmp / "src"), UsageError);
}

TEST(Corpus, RealFortunesPackage) {
  if (!fs::is_directory(default_fortunes_source_dir())) GTEST_SKIP() << "fortunes not installed";
  TempDir tmp;
  CorpusFiles f = prepare_fortunes_corpus(tmp / "fortunes", 0.1);
  EXPECT_GT(f.fortunes, 5000);
  EXPECT_GT(f.train_tokens, 1'500'000);
  double share = static_cast<double>(f.val_tokens) / (f.train_tokens + f.val_tokens);
  EXPECT_GT(share, 0.07);
  EXPECT_LT(share, 0.13);
  EXPECT_LT(TokenShard(f.train_path).max_token_id(), 256);
}

// A run without --data caches the corpus in the user's cache folder, never the working
// directory (issue #31: `train` wrote ./data/fortunes/ wherever it was started).
TEST(Corpus, CachedUnderTheUsersCacheFolder) {
  EXPECT_EQ(corpus_cache_dir("/x/cache", "/home/u"), "/x/cache/meshtrain/fortunes");
  EXPECT_EQ(corpus_cache_dir(nullptr, "/home/u"), "/home/u/.cache/meshtrain/fortunes");
  EXPECT_EQ(corpus_cache_dir("", "/home/u"), "/home/u/.cache/meshtrain/fortunes");
  // A relative XDG_CACHE_HOME is invalid by the spec: it would point into the cwd.
  EXPECT_EQ(corpus_cache_dir("rel", "/home/u"), "/home/u/.cache/meshtrain/fortunes");
  const fs::path none = corpus_cache_dir(nullptr, nullptr);
  EXPECT_TRUE(none.is_absolute()) << none;
  EXPECT_TRUE(fs::path(default_corpus_dir()).is_absolute()) << default_corpus_dir();
}

}  // namespace
}  // namespace mt
