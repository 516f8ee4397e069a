// The search: every combination of the layout knobs the request left open, kept when
// `meshtrain train` would accept it (validate_candidate) and it fits in the device's
// memory, timed by the time model, best (shortest step) first.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan/time_model.h"
#include "plan/work_budget.h"

namespace mt::plan {

struct Candidate {
  Layout layout;
  PlannedMemory memory;
  PredictedTime time;
  bool fits = false;
  double tokens_per_s = 0, model_tflops_per_device = 0, mfu = 0;
};

struct SearchResult {
  std::vector<Candidate> candidates;  // fitting ones, best first
  int considered = 0;                 // combinations enumerated
  int valid = 0;                      // of those, accepted by train's validation
  int fit = 0;                        // of those, fitting in memory
  int pruned = 0;                     // fitting, but provably slower than the kept ones
  // valid, but too large for the engine's 64-bit memory estimate while their lower bound
  // fits (memory_bounds.h): skipped, and said so
  int uncounted = 0;
  double work = 0;  // work units charged (work_budget.h), at most kSearchWorkLimit
};

// Throws UsageError: when a fixed knob makes every combination invalid (the validation's
// own message for the first of them), or when nothing valid fits (naming the smallest
// footprint found and the knob that would shrink it).
// keep: how many of the best candidates must be exact; a fitting layout whose lower bound
// is slower than the keep-th best so far is not simulated (counted in pruned). The default
// keeps (and simulates) every fitting layout.
SearchResult search_layouts(const PlanRequest& r, size_t keep = size_t(-1));

// Every combination of the open knobs (the fixed ones as given) with dp x tp x pp equal
// to the devices, not yet validated, in a fixed order; each (tp, pp)'s combinations are
// charged to the budget before they are visited. UsageError when a fixed tp, pp or dp
// cannot divide the devices.
void for_each_layout(const PlanRequest& r, WorkBudget& budget,
                     const std::function<void(const Layout&)>& visit);
// The same, collected.
std::vector<Layout> enumerate_layouts(const PlanRequest& r);

}  // namespace mt::plan
