// Sequential batches from token shards of either version (data/token_shard.h), in the order
// of docs/contracts.md §3, so that every parallel layout trains on exactly the tokens one
// worker would see.
//
// A global batch is B sequences of T inputs plus T targets (the inputs shifted by one):
//   sequence s of the batch (0 <= s < B) reads tokens[pos + s*T .. pos + s*T + T]
//   (T+1 tokens: inputs are the first T, targets the last T), then pos += B*T.
// When pos + B*T + 1 > ntok the batch would read past the end, so pos returns to 0
// first (llm.c's sequential loader; the tail of the shard is skipped, not wrapped).
//
// Several shards (a dataset of `meshtrain prepare`) are read as one stream: their tokens
// back to back, in the given order, positions counted over all of them.
//
// Slicing: data-parallel rank d owns sequences d*B/dp .. (d+1)*B/dp - 1 of each global
// batch; its microbatch j is the j-th run of b = B/(dp*M) consecutive sequences of that.
//
// Context parallelism (shard_sequences): the cp ranks of one dp rank read the same sequences
// and each keeps its zigzag rows of them (model/zigzag_layout.h): inputs and targets at the
// rank's true positions, T/cp per sequence.
//
// Shuffled order (shuffle_samples, the training default): global batch k takes draws
// k*B .. k*B+B-1 of a SampleIndex (data/sample_index.h) instead of the run of sequences at
// pos; the slicing over dp ranks, microbatches and cp rows is the same.
//
// Worked example (ntok = 20, B = 2, T = 4, dp = 1, M = 1): batch 0 reads tokens 0..8
// (inputs 0..3 | 4..7), pos = 8; batch 1 reads 8..16, pos = 16; batch 2 would need
// tokens 16..24 (24 > 20), so pos = 0 and it equals batch 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <optional>

#include "data/sample_index.h"
#include "data/token_shard.h"

namespace mt {

class DataLoader {
 public:
  // B: global batch in sequences; T: sequence length. Throws UsageError when B is not
  // divisible by dp_size * microbatches or the shard holds fewer than B*T + 1 tokens.
  DataLoader(const std::string& path, int B, int T, int dp_size = 1, int dp_rank = 0,
             int microbatches = 1);
  DataLoader(const std::vector<std::string>& paths, int B, int T, int dp_size = 1, int dp_rank = 0,
             int microbatches = 1);

  // From now on draw samples through the shuffled index of `seed` (files under index_dir);
  // the position counts draws from here on. The order does not depend on the layout.
  void shuffle_samples(uint64_t seed, const std::string& index_dir);
  bool shuffled() const { return sample_index_.has_value(); }
  // Samples of T+1 tokens at stride T in the stream: floor((ntok - 1) / T).
  int64_t samples() const { return (size_ - 1) / T_; }

  // Loads the next global batch (this rank's slice of it) and advances the position.
  void next_batch();
  // A hash of where every sequence of the last global batch starts in the stream (all B,
  // not only this rank's): equal in every layout that reads the same samples. For checks.
  uint64_t batch_hash() const { return batch_hash_; }

  // From the next batch on, keep only the rows `positions` of each sequence (a cp rank's
  // zigzag rows, model/zigzag_layout.h's zigzag_positions, given by the session: data/
  // sits below model/).
  void shard_sequences(std::vector<int> positions);
  // Rows per sequence in inputs() and targets(): T, or T/cp once sharded.
  int rows_per_sequence() const { return int(positions_.size()); }

  // This rank's microbatch j of the last loaded batch, each (b, rows_per_sequence()) int32,
  // b = B/(dp*M).
  const int32_t* inputs(int j) const;
  const int32_t* targets(int j) const;

  // Sequential: the token offset where the next batch starts (before the wrap check);
  // shuffled: the draws made so far. Save it in a checkpoint; set_position() on resume
  // reproduces the same batch sequence.
  int64_t position() const { return position_; }
  void set_position(int64_t position);
  void reset() { position_ = 0; }

  // Throws UsageError naming the file and the first id >= vocab. Scans each shard once.
  // Every batch copies ids of checked shards only: they fit the int32 inputs.
  void require_vocab(int64_t vocab) const;
  int64_t max_token_id() const;

  // Batches before the position returns to 0: floor((ntok - 1) / (B*T)).
  int64_t batches_per_epoch() const { return (size_ - 1) / tokens_per_batch(); }
  int64_t tokens_per_batch() const { return static_cast<int64_t>(B_) * T_; }
  int micro_batch_size() const { return b_; }
  const std::string& path() const { return shards_.front().path(); }

 private:
  // Copies n tokens starting at stream position pos (across shard boundaries).
  void copy_tokens(int64_t pos, int64_t n, int32_t* out) const;
  // Stream position of sequence s (0..B-1) of the batch starting at position_.
  int64_t sequence_start(int64_t s);

  std::vector<TokenShard> shards_;
  std::vector<int64_t> starts_;  // stream position of each shard's first token
  int64_t size_ = 0;             // tokens in all shards
  std::vector<int32_t> window_;  // one sequence's T+1 tokens
  std::vector<int> positions_;   // the positions of a sequence this rank keeps (0..T-1 unsharded)
  int B_, T_, dp_size_, dp_rank_, M_, b_;
  int64_t position_ = 0;
  std::optional<SampleIndex> sample_index_;  // set: shuffled order
  uint64_t batch_hash_ = 0;
  std::vector<int32_t> inputs_;   // (M, b, rows_per_sequence())
  std::vector<int32_t> targets_;  // (M, b, rows_per_sequence())
};

// For callers that hold only a path: the same check as DataLoader::require_vocab.
void require_shard_vocab(const std::string& path, int64_t vocab);

// The largest vocabulary a run can have (docs/contracts.md §10: 2^31-1, an int); the model's
// own bound, ModelConfig::kMaxVocab, is checked equal where both are seen (cli/train_setup).
inline constexpr int kMaxDataVocab = 2147483647;

// The vocabulary a run takes from its data when --vocab is not given: the largest id + 1,
// at least 256 (byte-level). UsageError when an id is beyond the largest vocabulary.
int vocab_of_shards(const std::vector<std::string>& paths);

}  // namespace mt
