// GPipe (Huang et al. 2019): every stage runs all m forwards, then all m backwards.
// Backward is fused (B = input + weight gradient, split_backward = false): splitting it
// buys nothing here because nothing is left to fill the gap with. Each stage holds all m
// microbatches' activations at the turn, which is what 1F1B fixes.
#include "schedule/schedule.h"

namespace mt {

Schedule schedule_gpipe(int stages, int microbatches) {
  ScheduleBuilder b(ScheduleKind::gpipe, stages, microbatches, 1, /*split=*/false);
  for (int s = 0; s < stages; ++s) {
    // warmup: every forward; the whole batch is in flight at the end of it.
    const int num_warmup = microbatches;
    for (int mb = 0; mb < num_warmup; ++mb) b.forward(s, mb, 0);
    // steady: none (no forward/backward overlap in GPipe).
    // cooldown: every backward, in microbatch order.
    for (int mb = 0; mb < microbatches; ++mb) b.backward(s, mb, 0);
  }
  return b.take();
}

}  // namespace mt
