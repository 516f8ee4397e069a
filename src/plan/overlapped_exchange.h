// The exposed exchange of one pass of the engine's overlapped MoE layer (--moe-overlap-parts
// P > 1; model/moe_parts.h, docs/moe.md "Overlapped all-to-all"), in the order
// MoeParts::run issues it (stop 42: dispatches two parts ahead). The ep group's exchanges
// finish in issue order (the local backend's op queue, comm/local/op_queue.h; MPI's
// nonblocking all-to-alls share the link): one channel, served first come first served,
// beside the rank's compute:
//
//   compute: local first | experts 0   | experts 1   | .. | experts P-1 | local last
//   issued:  d 0, d 1     | d 2 .. c 0  | d 3 .. c 1  | .. |     .. c P-1 |
//   channel: d 0, d 1, d 2, c 0, d 3, c 1, .., d P-1, c P-3, c P-2, c P-1
//
// Parts 0 and 1 leave before the first local work; step p waits for dispatch p, starts
// dispatch p+2, runs part p's experts and starts combine p; the last local work runs
// before the combines are waited for. With two dispatches in flight the channel need not
// be idle at a wait, so the waits are not separate terms: each exchange ends at
// max(its issue, the previous one's end) + its seconds, the compute waits for it, and
// the pass's exposed time is the sum of those waits (the closed form is a nest of maxima;
// the tests derive cases by hand). The parts are not equal (model/moe_part_sizes.h:
// 1 : 2 : .. : 2 : 1 from 3 parts on), so each exchange takes its part's figure.
// In backward the first local work also holds the unit above's W where the engine hands
// it over (model_chunk.cpp cover_below; the caller adds it, local_costs.cpp).
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

// The seconds the rank waits on the exchanges in one pass, walking the order above.
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
