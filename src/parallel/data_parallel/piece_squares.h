// The gradient norm's sums of squares, one per update piece (DataParallel::local_grad_squares),
// taken while the rank waits at the end of the backward for its last buckets' reductions.
//
// A piece's gradient is final once its bucket's reduction has come back (ZeRO 0: the
// all-reduce; ZeRO 1: the reduce-scatter of the owned chunk). At the end of the backward a
// rank that arrives first waits for its peer to reach the last buckets; it squares the
// pieces of the buckets already reduced meanwhile (GradBuckets::finish's while_waiting),
// instead of after the wait, where the squares were one more pass over the gradients on
// the step's path (issue #33, docs/data_parallel.md "Passes after the backward").
//
// Bit for bit: each piece is squared by the same call on the same elements as before
// (sum_squares, one piece at a time, on the rank's thread), and local_grad_squares adds the
// pieces' sums in the same (piece) order; only when each sum is taken moves. A piece whose
// gradient changes after its bucket came back (the tied embedding's sum over pipeline
// stages, tp-partial gradients, --dp-sync's scaling) is forgotten and squared at the norm.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "parallel/data_parallel/flat_layout.h"

namespace mt {

class PieceSquares {
 public:
  struct Piece {
    size_t grad_off, n;  // in the gradient storage
    int bucket;          // whose reduction makes it final; < 0: squared at the norm only
  };
  PieceSquares() = default;
  explicit PieceSquares(std::vector<Piece> pieces);
  // Pieces given as (offset, n) in the flat gradients (stages 0-1), each final with the
  // bucket whose flat range holds it; early false: every piece is squared at the norm.
  static std::vector<Piece> in_buckets(const FlatLayout& layout,
                                       const std::vector<std::pair<size_t, size_t>>& pieces,
                                       bool early);

  // Forgets every sum (a new step's gradients).
  void begin_step();
  // Squares one piece not yet squared whose bucket is reduced (reduced[bucket] != 0);
  // false when there is none.
  bool square_next(const float* grads, const std::vector<char>& reduced);
  // Every piece's sum of squares, in piece order: the ones taken early, the rest taken now
  // in one OpenMP team (sum_squares_each).
  const std::vector<double>& sums(const float* grads);
  // Piece i's gradient changed (or every piece's): its sum is taken again at sums().
  void forget(size_t i) { done_[i] = 0; }
  void forget_all();
  // Floats squared by square_next since begin_step (tests, docs).
  size_t early_floats() const { return early_; }

 private:
  std::vector<Piece> pieces_;
  std::vector<double> sq_;
  std::vector<char> done_;
  size_t early_ = 0;
};

}  // namespace mt
