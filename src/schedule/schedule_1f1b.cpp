// 1F1B (PipeDream-Flush / Megatron's non-interleaved schedule). Stage s first runs enough
// forwards to fill the pipe below it, then alternates one forward with one backward, then
// drains the outstanding backwards. At most p - s microbatches are in flight on stage s, so
// activation memory is bounded by p instead of GPipe's m, at the same bubble.
// Backward is fused (split_backward = false).
#include <algorithm>

#include "schedule/schedule.h"

namespace mt {

Schedule schedule_1f1b(int stages, int microbatches) {
  ScheduleBuilder b(ScheduleKind::one_f_one_b, stages, microbatches, 1, /*split=*/false);
  for (int s = 0; s < stages; ++s) {
    // Forwards needed before the first backward can come back from the last stage.
    const int num_warmup = std::min(stages - 1 - s, microbatches);
    const int num_steady = microbatches - num_warmup;
    // warmup
    for (int mb = 0; mb < num_warmup; ++mb) b.forward(s, mb, 0);
    // steady: one forward, then the backward of the oldest in-flight microbatch
    for (int i = 0; i < num_steady; ++i) {
      b.forward(s, num_warmup + i, 0);
      b.backward(s, i, 0);
    }
    // cooldown: the backwards of the warmup forwards
    for (int mb = num_steady; mb < microbatches; ++mb) b.backward(s, mb, 0);
  }
  return b.take();
}

}  // namespace mt
