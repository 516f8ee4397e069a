// Exact, reproducible sums of doubles over a group. The communicators carry no f64
// reduction, and a reduction tree would add in an order that depends on the backend: the
// values travel as bytes and every rank adds them in group rank order, so every rank (and
// every layout with the same groups) gets the same double to the last bit.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace mt {

// Every rank's x, in group rank order (identical vector on every rank; collective).
std::vector<double> gather_doubles(Communicator& group, double x);
// Their sum, added in rank order (collective; a group of one returns x without one).
double sum_in_rank_order(Communicator& group, double x);

// sum_in_rank_order in two halves: the all-gather is issued at construction and runs
// behind whatever the rank does next; finish() waits for it and adds in rank order (the
// same double). Why: a blocking collective is a point where every rank waits for the
// slowest; one issued before another wait is settled within that wait (a step issues its
// loss's sum before it waits for the gradients, so the ranks meet once, not twice).
// Collective at construction; finish() once. Movable: the buffer the peers read and
// write lives on the heap.
class RankOrderSum {
 public:
  RankOrderSum() = default;  // nothing issued: finish() returns 0
  RankOrderSum(Communicator& group, double x);
  RankOrderSum(RankOrderSum&&) = default;
  RankOrderSum& operator=(RankOrderSum&&) = delete;
  // Never frees the buffer under a gather still running (a step that threw before its
  // finish()): waits for it, ignoring a failure, which is reported where it happened.
  ~RankOrderSum();
  Work& work() { return work_; }
  double finish();

 private:
  size_t n_ = 0;
  std::unique_ptr<double[]> buf_;  // [0]: this rank's x; [1, 1 + n_): every rank's
  Work work_;
};

}  // namespace mt
