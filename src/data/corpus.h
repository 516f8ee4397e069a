// The embedded default corpus: the plain-text fortune files of Debian's `fortunes`
// package (about 2.5 MB of English quips, poems and definitions), turned into byte-token
// train/val shards so that `meshtrain train` works with no data download.
//
// Preparation, deterministic on every machine with the same package:
//   1. every regular file in the source directory except *.dat / *.u8 (index files and
//      symlinks to the same text), in name order;
//   2. split into fortunes at lines holding only "%"; blank fortunes are dropped and each
//      fortune is made to end with exactly one '\n';
//   3. shuffle with a fixed seed (so val samples every file, not just the last ones);
//   4. the first round(val_fraction * n) fortunes (at least 1) form val, the rest train;
//   5. each part is written as fortunes followed by a "%\n" line each — the fortune file
//      format itself, so the model learns where a fortune ends and samples look familiar.
// A manifest.json beside the shards records the source hash and parameters; shards are
// rebuilt only when it is missing, stale, or the shards don't match it. Concurrent
// preparers (several MPI processes) write identical bytes atomically, so racing is safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

struct CorpusFiles {
  std::string train_path;
  std::string val_path;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t fortunes = 0;
  bool rebuilt = false;  // false: the existing shards were up to date
};

// Where the prepared corpus is cached: fortunes/ in the user's cache folder
// (data/cache_dir.h), never the working directory.
std::string default_corpus_dir();
// The rule above for given values of XDG_CACHE_HOME and HOME (null or empty: unset).
std::string corpus_cache_dir(const char* xdg_cache_home, const char* home);
// "/usr/share/games/fortunes", where Debian's package installs the text.
std::string default_fortunes_source_dir();

// Builds (or reuses) out_dir/train.bin, out_dir/val.bin and out_dir/manifest.json.
// Throws UsageError when val_fraction is not in (0, 1), or when the source directory
// holds no fortunes and no up-to-date shards exist (the package is not installed).
CorpusFiles prepare_fortunes_corpus(const std::string& out_dir, double val_fraction = 0.1,
                                    const std::string& source_dir = default_fortunes_source_dir());

// Step 2 above on one file's text.
std::vector<std::string> split_fortunes(std::string_view text);
// Step 5 above.
std::string join_fortunes(const std::vector<std::string>& fortunes);

}  // namespace mt
