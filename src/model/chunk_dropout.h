// A chunk's dropout bookkeeping: which global tokens each activation slot holds, so that the
// forward, a recomputation and the backward of one microbatch (possibly far apart under a
// pipeline schedule) use the same masks. Microbatch j of the data-parallel rank whose first
// sequence in the global batch is `first_sequence` holds sequences first_sequence + j*b ..
// + b - 1, so its row r = i*T + t (sequence i, row t of T) is global token
// (first_sequence + j*b + i) * seq_len + position(t): position(t) = t on one worker, the
// row's true position on a context-parallel rank (T = seq_len / cp of them).
#pragma once

#include <cstdint>
#include <vector>

#include "model/dropout_state.h"

namespace mt {

class ChunkDropout {
 public:
  // sp_ranks > 1: sequence parallelism, this rank's residual rows are its 1/sp_ranks share.
  ChunkDropout(float p, int sp_rank, int sp_ranks) : sp_rank_(sp_rank), sp_ranks_(sp_ranks) {
    state_.p = p;
  }
  bool enabled() const { return state_.p > 0; }
  // Once per run: the run's seed and this rank's first sequence of every global batch.
  void configure(uint64_t seed, int64_t first_sequence) {
    state_.seed = seed;
    first_sequence_ = first_sequence;
  }
  void set_step(uint64_t step) { state_.step = step; }
  // The rows' true positions (null: 0..seq_len-1) and the whole sequence's length; set when
  // the chunk's sequence context is built (context parallelism: the zigzag shard).
  void set_positions(const int* positions, int seq_len) {
    positions_ = positions;
    state_.seq_len = seq_len;
  }
  // The slot about to run microbatch j's forward.
  void set_microbatch(int slot, int j, int b, int T);
  // The blocks' view for the slot: on while training, off (row_tokens null) otherwise.
  void activate(int slot, bool training);
  const DropoutState* state() const { return &state_; }
  // The embedding's output (forward) or its gradient (backward) through its mask, in place:
  // x holds this rank's rows of the residual stream (N = b*T of them, or N/sp_ranks).
  void embedding(float* x, int N, int C, bool backward) const;

 private:
  DropoutState state_;
  int64_t first_sequence_ = 0;
  const int* positions_ = nullptr;
  int sp_rank_ = 0, sp_ranks_ = 1;
  std::vector<std::vector<int64_t>> rows_;  // per slot
};

}  // namespace mt
