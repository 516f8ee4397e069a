// Context parallelism's zigzag ("head-tail") layout of one sequence (docs/contracts.md §11):
//
//   T tokens cut into 2N chunks of T/(2N); cp rank r holds chunks r and 2N-1-r, in that
//   order, as its T/N rows. With N = 2, T = 8:
//
//     position  0 1 | 2 3 | 4 5 | 6 7
//     chunk     0   | 1   | 2   | 3
//     rank      0   | 1   | 1   | 0        rank 0 rows: 0 1 6 7, rank 1 rows: 2 3 4 5
//
// Under a causal mask an early chunk sees few keys and a late one many; pairing chunk r
// with chunk 2N-1-r gives every rank the same attention work. A rank's rows are its
// tokens' true positions: RoPE rotates by them and the causal mask compares them.
#pragma once

#include <vector>

#include "model/config.h"

namespace mt {

// The model one rank of a cp group builds: seq / cp rows of each sequence, with the position
// table (gpt2) still holding every position of the whole sequence.
ModelConfig cp_rank_model(const ModelConfig& cfg, int cp);

// The true positions of cp rank `rank`'s T/cp rows. T must be divisible by 2 * cp
// (validated with the options before any rank starts; RuntimeError here).
std::vector<int> zigzag_positions(int T, int cp, int rank);

}  // namespace mt
