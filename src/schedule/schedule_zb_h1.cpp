// ZB-H1, the handcrafted zero-bubble schedule of Qi et al. 2023 ("Zero Bubble Pipeline
// Parallelism", ICLR 2024). Backward is split into B (gradient w.r.t. the chunk's input,
// which the previous stage waits for) and W (gradient w.r.t. its weights, which nobody
// waits for). The schedule is 1F1B with each stage's W's postponed: stage s runs B's
// s microbatches ahead of its W's, so the B chain back to stage 0 is never delayed by a W,
// and the postponed W's fill the drain at the end. With F = B = W the bubble drops from
// 1F1B's (p-1)(F+B+W) per stage to (p-1)(F+B-W), a third.
//
// Memory: a microbatch's activations live from its F to its W. Stage s holds at most
// (p-1-s) warmup + 1 + s deferred = p microbatches, the same peak as 1F1B's stage 0.
#include <algorithm>

#include "schedule/schedule.h"

namespace mt {

Schedule schedule_zb_h1(int stages, int microbatches) {
  ScheduleBuilder b(ScheduleKind::zb_h1, stages, microbatches, 1, /*split=*/true);
  for (int s = 0; s < stages; ++s) {
    const int num_warmup = std::min(stages - 1 - s, microbatches);  // as 1F1B
    const int w_lag = s;  // how many B's run ahead of the W's on this stage
    const int num_steady = microbatches - num_warmup;
    int next_w = 0;
    auto weight_after_backward = [&](int mb) {
      if (mb - w_lag >= 0) b.weight(s, next_w++, 0);
    };
    // warmup
    for (int mb = 0; mb < num_warmup; ++mb) b.forward(s, mb, 0);
    // steady: F, B and (after the lag) W
    for (int i = 0; i < num_steady; ++i) {
      b.forward(s, num_warmup + i, 0);
      b.backward(s, i, 0);
      weight_after_backward(i);
    }
    // cooldown: the remaining B's, each followed by a W once past the lag ...
    for (int mb = num_steady; mb < microbatches; ++mb) {
      b.backward(s, mb, 0);
      weight_after_backward(mb);
    }
    // ... then the postponed W's fill the drain
    while (next_w < microbatches) b.weight(s, next_w++, 0);
  }
  return b.take();
}

}  // namespace mt
