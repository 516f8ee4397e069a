// The global gradient norm: the sum of squared gradients over the whole model, every
// parameter counted once across the dp, tp, pp and ep groups, identical on every rank.
//
//   dp  ZeRO 0: every dp rank holds the whole reduced gradient (nothing to add);
//       ZeRO >= 1: the ranks hold disjoint pieces, added over dp (DataParallel::sum_over).
//   tp  tensors split over tp add up over it; replicated ones (identical on every tp
//       rank) count once.
//   ep  each rank holds its experts whole, the other ranks of its ep group others: the
//       experts' share adds up over ep (DataParallel's group); under tp they are replicated
//       (the tokens are split, model/moe_layer.h) and count once.
//   pp  the stages add up. A tensor held on two stages (the tied wte on the first and the
//       last) would count twice: `counted_elsewhere` is this rank's copy of such
//       gradients (tied_embedding_copy), subtracted before the sum over pp.
//
// Every sum is of doubles in group rank order (comm/rank_order_sum.h), so the result is
// reproducible bit for bit. The order of the operations is the trainer's of before the
// split (subtracting the copy rather than skipping it), so norms did not change.
#pragma once

#include <span>

#include "comm/communicator.h"
#include "parallel/data_parallel/data_parallel.h"

namespace mt {

struct GradNormGroups {
  Communicator* tp = nullptr;  // null or of one rank: no tensor parallelism
  Communicator* pp = nullptr;  // null or of one rank: no pipeline
};

// After DataParallel::finish_gradients (and the tied embedding's sum). Collective over
// dp (ZeRO >= 1), tp, ep and pp, in that order.
double global_grad_sum_squares(DataParallel& dp, const GradNormGroups& groups,
                               std::span<const float> counted_elsewhere = {});

}  // namespace mt
