#include "schedule/grad_sync_points.h"

#include <map>

#include "core/error.h"

namespace mt {

namespace {

// The local chunk whose weight gradients step e computes, or -1: a fused B (or an FB's B
// half) when the backward is not split, a W when it is.
int gradient_chunk(const Schedule& s, const Action& a, const ExecStep& e) {
  if (s.split_backward) return a.kind == ActionKind::W ? a.chunk : -1;
  if (a.kind == ActionKind::B && e.half == Half::whole) return a.chunk;
  if (a.kind == ActionKind::FB && e.half == Half::backward) return a.b_chunk;
  return -1;
}

}  // namespace

GradSyncPoints grad_sync_points(const Schedule& s, int stage, const std::vector<ExecStep>& steps,
                                int delay) {
  MT_CHECK(delay >= 0 && stage >= 0 && stage < s.stages);
  GradSyncPoints g;
  g.after_step.resize(steps.size());
  g.own_last.assign(steps.size(), false);
  // Phase 1: the stage's gradient computations in order, and each chunk's last among them.
  std::vector<size_t> computations;  // positions in steps
  std::map<int, size_t> last;        // chunk -> its last entry of computations
  for (size_t i = 0; i < steps.size(); ++i) {
    const int chunk = gradient_chunk(s, s.actions[size_t(stage)][size_t(steps[i].index)], steps[i]);
    if (chunk < 0) continue;
    last[chunk] = computations.size();
    computations.push_back(i);
  }
  // Phase 2: each chunk's sync `delay` computations after its last, or after the list.
  for (const auto& [chunk, j] : last) {
    if (size_t(delay) >= computations.size() - j) {
      g.at_end.push_back(chunk);
      continue;
    }
    const size_t at = computations[j + size_t(delay)];
    g.after_step[at].push_back(chunk);
    if (delay == 0) g.own_last[at] = true;
  }
  return g;
}

}  // namespace mt
