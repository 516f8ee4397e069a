// `meshtrain plan --compare SPEC --compare SPEC ...`: two or more layouts side by side, the
// "when to pay the communication tax" answer. A SPEC is a comma-separated list of the fixed
// knobs in plan's own flag names without dashes (`dp=16,tp=4,pp=8,schedule=interleaved,
// virtual-stages=8,zero=2,sequence-parallel=true,recompute=selective,micro-batch=1`); each
// applies over the request's own fixed knobs and what it leaves open is searched, so each
// column is the best layout of its kind. Each column shows the step split into what adds up
// to it (compute, the exposed tp/cp/ep/ZeRO-3 communication inside the pipeline, the bubble,
// the exposed dp reduction, the optimizer), the memory per device by kind, and the ratio of
// its step to the best column's.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "plan/search.h"

namespace mt::plan {

// The request with SPEC's knobs fixed. UsageError naming --compare and the SPEC on an
// unknown key, a missing or malformed value, or a key given twice.
PlanRequest with_layout_spec(const PlanRequest& base, const std::string& spec);

struct Compared {
  std::string spec;
  Candidate best;
};

// The best candidate of each SPEC, in the order given. UsageError when fewer than two are
// given, or (prefixed with the SPEC) when one has no valid or fitting layout.
std::vector<Compared> compare_layouts(const PlanRequest& r, const std::vector<std::string>& specs);

// The step of a candidate split into parts that sum to it (seconds).
struct StepBreakdown {
  double compute = 0;  // the pipeline's busy time less the exposed comm inside it
  double tp = 0, cp = 0, ep = 0, zero3 = 0;  // exposed inside the pipeline (slowest stage)
  double bubble = 0;                         // the pipeline's idle time
  double dp = 0;                             // exposed after the pipeline
  double optimizer = 0;                      // incl. local bf16 weight copies
};
StepBreakdown step_breakdown(const PredictedTime& t);

void print_compare(std::ostream& out, const PlanRequest& r, const std::vector<Compared>& c);
// {"compare": [{"spec", "layout", "predicted", "breakdown_s", "ratio_to_best", "command"}]}
std::string compare_json(const PlanRequest& r, const std::vector<Compared>& c);

}  // namespace mt::plan
