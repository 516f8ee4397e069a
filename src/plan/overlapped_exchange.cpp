#include "plan/overlapped_exchange.h"

#include <algorithm>

namespace mt::plan {

double exposed_parts_exchange(const PartsPass& p, int parts) {
  const double d = p.dispatch, c = p.combine, X = p.experts;
  const auto over = [](double x) { return std::max(0.0, x); };
  // Part 0's rows travel alone, under the first local work.
  const double first = over(d - p.first);
  // Between the parts' experts: under part 0's, dispatch 1 alone; under part p's, combine
  // p-1 then dispatch p+1, queued in that order.
  const double between = over(d - X) + (parts - 2) * over(c + d - X);
  // Combine P-2 starts when the last part's experts do (its turn on the channel comes after
  // dispatch P-1, which step P-1 waited for); combine P-1 after it, or after those experts.
  const double last = over(over(c - X) + c - p.last);
  return first + between + last;
}

}  // namespace mt::plan
