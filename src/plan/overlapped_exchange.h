// The exposed exchange of one pass of the engine's overlapped MoE layer (--moe-overlap-parts
// P > 1; model/moe_parts.h, docs/moe.md "Overlapped all-to-all"), in the order
// MoeParts::run issues it. The ep group's exchanges finish in issue order (the local
// backend's op queue, comm/local/op_queue.h; MPI's nonblocking all-to-alls share the
// link): one channel, served first come first served, beside the rank's compute:
//
//   compute: local first | experts 0 | experts 1 | .. | experts P-1 | local last
//   channel: dispatch 0  | dispatch 1 | combine 0, dispatch 2 | .. | combine P-2, combine P-1
//
// Step p waits for dispatch p, starts dispatch p+1, runs part p's experts and starts
// combine p. So the waits are: part 0's dispatch beyond the first local work; under part
// 0's experts only dispatch 1 travels; under part p's (0 < p < P-1) combine p-1 and
// dispatch p+1; after the last part's experts, whatever of combine P-2 is left and
// combine P-1, beyond the last local work. The parts are not equal (model/moe_part_sizes.h:
// 1 : 2 : .. : 2 : 1 from 3 parts on), so each wait takes the figures of the parts it
// involves. Stop 42 moved the engine to two dispatches ahead (dispatches 0 and 1 before
// the first local work, p+2 before part p's experts) and covers the first backward
// dispatch with the unit above's W: this model still prices the order above
// (docs/planner.md says so).
#pragma once

#include <cstddef>
#include <vector>

#include "model/moe_part_sizes.h"

namespace mt::plan {

struct PartsPass {
  // Per part p (P >= 2 entries each, seconds): its rows' dispatch and combine, its experts.
  std::vector<double> dispatch, combine, experts;
  // LocalWork (moe_parts.h): under part 0's dispatch (after every part's rows are
  // prepared) and under the last combine (before any combine is waited for).
  double first = 0, last = 0;
};

// The seconds the rank waits on the exchanges in one pass (d_p, c_p, X_p: part p's
// dispatch, combine and experts):
//   max(0, d_0 - first) + max(0, d_1 - X_0) + sum_{p=1}^{P-2} max(0, c_{p-1} + d_{p+1} - X_p)
//   + max(0, max(0, c_{P-2} - X_{P-1}) + c_{P-1} - last)
// With no compute at all it is every exchange, sum (d_p + c_p); with experts and local work
// longer than the exchanges, nothing.
double exposed_parts_exchange(const PartsPass& p);

// A pass's figures for the engine's P parts of `whole` rows: figure(rows) of each part's
// rows (moe_part_share), e.g. an all-to-all's seconds for that many rows.
template <class F>
auto per_part(int parts, double whole, const F& figure) {
  std::vector<decltype(figure(whole))> v;
  v.reserve(std::size_t(parts));
  for (int q = 0; q < parts; ++q) v.push_back(figure(whole * moe_part_share(parts, q)));
  return v;
}

}  // namespace mt::plan
