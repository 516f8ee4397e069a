// Exact, reproducible sums of doubles over a group. The communicators carry no f64
// reduction, and a reduction tree would add in an order that depends on the backend: the
// values travel as bytes and every rank adds them in group rank order, so every rank (and
// every layout with the same groups) gets the same double to the last bit.
#pragma once

#include <vector>

#include "comm/communicator.h"

namespace mt {

// Every rank's x, in group rank order (identical vector on every rank; collective).
std::vector<double> gather_doubles(Communicator& group, double x);
// Their sum, added in rank order (collective; a group of one returns x without one).
double sum_in_rank_order(Communicator& group, double x);

}  // namespace mt
