// The waits that sleep, per rank and step (rank_waits.h).
#include "plan/rank_waits.h"

namespace mt::plan {

double blocking_waits_per_rank(const Layout& l, const std::vector<int>& blocked_receives,
                               double world_all_reduces) {
  double pipeline = 0;
  for (int b : blocked_receives) pipeline += b;
  if (!blocked_receives.empty()) pipeline /= double(blocked_receives.size());
  const double collective_after_wake = l.tp * l.cp > 1 ? pipeline : 0;
  const double step_end = l.pp > 1 ? world_all_reduces * (l.pp - 1) / l.pp : 0;
  return pipeline + collective_after_wake + step_end;
}

}  // namespace mt::plan
