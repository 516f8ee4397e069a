// `meshtrain prepare`: text in, a dataset directory out (docs/data.md, "Preparing your own
// text"):
//   DIR/manifest.json        what was done: tokenizer record, rule, seed, split figures
//   DIR/tokenizer.model      the SentencePiece model (not for the byte tokenizer)
//   DIR/train_000000.bin ... llm.c token shards of at most --shard-tokens each
//   DIR/train.docs           where each document starts (data/shard_writer.h)
//   DIR/val_000000.bin, DIR/val.docs  the same for validation (when --val-fraction > 0)
// Each document is followed by the tokens of an end marker: the separator line for the
// separator rule (the fortune-file format), a newline otherwise, so a model learns where
// documents end and a decoded shard reads like the input.
//
// Split: document i (0-based, in input order) goes to validation when a counter-based
// uniform draw u(seed, i) < val_fraction, so the split depends only on the seed and the
// document's index, not on sizes or the order of work. Then each split's documents are put
// in a seeded order (--shuffle-seed; --no-shuffle keeps the input order), so a reader of the
// shards in sequence does not see one source after another. Memory: one shard buffer per split
// plus the tokenizer's training sample, whatever the corpus size.
//
// The directory is filled under a temporary name and renamed into place when complete
// (core/atomic_file.h): a failure leaves no dataset, or the previous one untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/dataset_manifest.h"
#include "data/tokenizer.h"

namespace mt {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories, "-" (stdin)
  std::string out;
  std::string tokenizer = "byte";  // byte | bpe | unigram | PATH.model
  int vocab_size = 8192;           // bpe / unigram
  bool vocab_size_given = false;   // --vocab-size on the command line (refused for byte / FILE)
  std::string documents = "file";  // file | separator | blank
  std::string separator = "%";
  double val_fraction = 0.1;
  uint64_t seed = 1337;
  // Documents in a seeded order in each split (data/document_shuffle.h); false: input order.
  bool shuffle = true;
  uint64_t shuffle_seed = 1337;
  int64_t shard_tokens = 100'000'000;
  double tokenizer_sample_mb = 16;  // text the tokenizer trains on (the first documents)
  int threads = 2;                  // SentencePiece training and encoding, 1..256
  size_t encode_batch_bytes = size_t(4) << 20;  // text encoded on the threads at once
  bool skip_binary = false;                     // leave binary files inside directories out
};

struct PrepareProgress {
  const char* phase;                 // "sampling", "training tokenizer", "encoding"
  uint64_t bytes_read, total_bytes;  // total 0: unknown (stdin)
  int64_t documents, tokens;
};

// Checks every option and input, then writes the dataset. Throws UsageError for bad
// options or input (nothing is written), RuntimeError for I/O failures.
Dataset prepare_dataset(const PrepareOptions& o,
                        const std::function<void(const PrepareProgress&)>& progress = {});

// Whether document `index` goes to validation.
bool is_validation_document(uint64_t index, uint64_t seed, double val_fraction);

}  // namespace mt
