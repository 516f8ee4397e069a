// ZeRO 3 / FSDP's per-block collectives against the compute they prefetch under. A pass
// runs its blocks in order on the compute stream; the comm stream runs, one at a time, each
// block's parameter all-gather (before its forward, and again before its backward) and, in
// the backward, its gradient reduce-scatter. A gather may start only once a gather buffer is
// free: with `prefetch` gathers ahead (zero3_prefetch; two buffers at 1), block i's gather
// waits for block i - prefetch - 1's compute to end. What the compute stream waits for is
// exposed: at least the first block's gather of every pass (nothing precedes it to hide
// under) and the last block's reduce-scatter (the tail: nothing follows it), and, when a
// block's collectives outlast its compute, the difference on every block.
#pragma once

namespace mt::plan {

struct Zero3Pass {
  double compute = 0;  // one block's compute of the pass
  double gather = 0;   // one block's parameter all-gather
  double scatter = 0;  // one block's gradient reduce-scatter (0 in the forward)
};

// The seconds the pass takes beyond `blocks` x compute, blocks >= 1, prefetch >= 0.
double zero3_pass_exposed(const Zero3Pass& p, int blocks, int prefetch);

}  // namespace mt::plan
