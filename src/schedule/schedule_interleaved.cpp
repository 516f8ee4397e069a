// Interleaved 1F1B (Narayanan et al. 2021, Megatron's virtual pipeline). Each stage holds v
// model chunks (local chunk c of stage s is model chunk c*p + s). Work is ordered over
// "virtual microbatches" k = 0 .. m*v-1: microbatches go in groups of p, and each group
// passes through local chunk 0, then 1, ... before the next group starts; backwards visit
// the chunks in reverse. The pipe fills v times faster, so the bubble shrinks by v, at the
// cost of v times more point-to-point messages. The grouping needs m % p == 0.
// Backward is fused (split_backward = false).
#include <algorithm>

#include "core/error.h"
#include "schedule/schedule.h"

namespace mt {

namespace {

struct VirtualOrder {
  int p, v;
  int microbatch(int k) const { return (k / (p * v)) * p + k % p; }
  int forward_chunk(int k) const { return (k % (p * v)) / p; }
  int backward_chunk(int k) const { return v - 1 - forward_chunk(k); }
};

}  // namespace

Schedule schedule_interleaved(int stages, int microbatches, int virtual_stages) {
  ScheduleBuilder b(ScheduleKind::interleaved, stages, microbatches, virtual_stages,
                    /*split=*/false);
  MT_REQUIRE(microbatches % stages == 0, "--schedule interleaved needs --microbatches (",
             microbatches, ") to be a multiple of --pp (", stages,
             "): microbatches go through the chunks in groups of pp");
  const VirtualOrder order{stages, virtual_stages};
  const int total = microbatches * virtual_stages;
  for (int s = 0; s < stages; ++s) {
    // The first backward here is microbatch 0 of the last local chunk. Before it arrives,
    // stage s can run the first group's forwards of the other v-1 chunks ((v-1)*p) plus
    // two per stage after it: the time for a message to go down one stage and come back.
    const int num_warmup = std::min((stages - 1 - s) * 2 + (virtual_stages - 1) * stages, total);
    const int num_steady = total - num_warmup;
    auto fwd = [&](int k) { b.forward(s, order.microbatch(k), order.forward_chunk(k)); };
    auto bwd = [&](int k) { b.backward(s, order.microbatch(k), order.backward_chunk(k)); };
    // warmup
    for (int k = 0; k < num_warmup; ++k) fwd(k);
    // steady: forward of virtual microbatch k + warmup, then backward of k
    for (int i = 0; i < num_steady; ++i) {
      fwd(num_warmup + i);
      bwd(i);
    }
    // cooldown
    for (int k = num_steady; k < total; ++k) bwd(k);
  }
  return b.take();
}

}  // namespace mt
