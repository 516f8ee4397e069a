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
// combine P-1, beyond the last local work.
#pragma once

namespace mt::plan {

struct PartsPass {
  double dispatch = 0, combine = 0;  // one part's rows, each way (seconds)
  double experts = 0;                // one part's experts
  // LocalWork (moe_parts.h): under part 0's dispatch (after every part's rows are
  // prepared) and under the last combine (before any combine is waited for).
  double first = 0, last = 0;
};

// The seconds the rank waits on the exchanges in one pass over `parts` >= 2 parts:
//   max(0, d - first) + max(0, d - X) + (P - 2) max(0, c + d - X)
//   + max(0, max(0, c - X) + c - last)
// (d, c, X: one part's dispatch, combine and experts). With no compute at all it is every
// exchange, P (d + c); with experts and local work longer than the exchanges, nothing.
double exposed_parts_exchange(const PartsPass& p, int parts);

}  // namespace mt::plan
