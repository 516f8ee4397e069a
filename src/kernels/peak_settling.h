// When a repeated measurement has settled: the rule kernels/gemm_peak.h applies twice, to
// its warm-up (one GEMM's rate per call) and to its rounds (one round's best rate per call).
// A fixed time slot cannot tell a warm-up still ramping (the AMX unit and the clock after an
// idle spell: 51, 510, 670, 700 GFLOP/s in a fresh process) or a whole slot spent under a
// neighbour's burst (103 against 154-167 GFLOP/s in the same minutes, stop 37) from the
// steady state; two consecutive values that agree can. Rates only: no clock is read here
// except the cap, so the tests drive it with scripted values.
#pragma once

#include <functional>

namespace mt {

struct SettleRule {
  double agree = 0.05;     // consecutive values within this fraction of the larger agree
  int min_calls = 2;       // calls before agreement may end it (at least 2)
  int max_calls = 8;       // the cap in calls ...
  double max_seconds = 0;  // ... and in wall seconds, once min_calls are done (0: none)
};

struct Settled {
  double best = 0;  // the largest value seen (outside load only ever lowers a rate)
  double last = 0;  // the value that ended it
  int calls = 0;
  bool settled = false;  // two consecutive values agreed before a cap
};

// a and b within `fraction` of the larger (both > 0).
bool rates_agree(double a, double b, double fraction);

// Calls `measure` until two consecutive values agree (once rule.min_calls are done) or a cap
// is reached; every value counts towards `best`.
Settled measure_until_settled(const std::function<double()>& measure, const SettleRule& rule);

}  // namespace mt
