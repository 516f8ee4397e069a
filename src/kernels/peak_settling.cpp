#include "kernels/peak_settling.h"

#include <algorithm>
#include <cmath>

#include "core/timer.h"

namespace mt {

bool rates_agree(double a, double b, double fraction) {
  const double larger = std::max(a, b);
  return a > 0 && b > 0 && std::fabs(a - b) <= fraction * larger;
}

Settled measure_until_settled(const std::function<double()>& measure, const SettleRule& rule) {
  Settled s;
  Stopwatch clock;
  const int min_calls = std::max(2, rule.min_calls);
  const int max_calls = std::max(min_calls, rule.max_calls);
  double previous = 0;
  while (s.calls < max_calls) {
    s.last = measure();
    ++s.calls;
    s.best = std::max(s.best, s.last);
    s.settled = s.calls >= min_calls && rates_agree(previous, s.last, rule.agree);
    if (s.settled) break;
    if (s.calls >= min_calls && rule.max_seconds > 0 && clock.elapsed() >= rule.max_seconds) break;
    previous = s.last;
  }
  return s;
}

}  // namespace mt
