// A dataset directory of `meshtrain prepare` as a reader sees it: DIR/manifest.json names
// the tokenizer, the document rule and, per split, its shards, its document index and its
// figures (data/prepare.h lists the files). Everything in it is checked before it is used:
// the manifest is read through core/input_file.h (a FIFO is refused, not waited on; at most
// kMaxJsonInputBytes), every field must have its type and range, file names must be plain
// names inside the directory, and the shards must hold the tokens the manifest records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace mt {

inline constexpr int kDatasetFormat = 1;
inline constexpr const char* kDatasetManifest = "manifest.json";
inline constexpr const char* kDatasetTokenizerModel = "tokenizer.model";

struct DatasetSplit {
  std::vector<std::string> shards;  // paths
  std::string docs;                 // path of the document index
  int64_t tokens = 0, documents = 0;
  uint64_t bytes = 0;
  double bytes_per_token() const { return tokens ? double(bytes) / double(tokens) : 0; }
};

struct Dataset {
  std::string dir;
  int skipped_binary = 0;  // files --skip-binary left out (this run of prepare only)
  // Directories inside the inputs left out as prepare's own output (earlier datasets, the
  // one being replaced): their manifest and shards are not training text.
  std::vector<std::string> skipped_outputs;
  TokenizerRecord tokenizer;  // file absolute
  std::string rule, separator;
  DatasetSplit train, val;  // val.shards empty without validation
};

// True when `dir` holds a manifest.json written by prepare; false when it holds none. A
// manifest.json that cannot be read (a FIFO, a directory, too large) is a UsageError naming
// it, never a hang or a "no".
bool is_dataset_dir(const std::string& dir);

// Reads and checks a dataset. Throws UsageError naming the manifest and the field.
Dataset read_dataset(const std::string& dir);

}  // namespace mt
