#include "plan/overlapped_exchange.h"

#include <algorithm>

#include "core/error.h"

namespace mt::plan {

double exposed_parts_exchange(const PartsPass& p) {
  const std::vector<double>&d = p.dispatch, &c = p.combine, &X = p.experts;
  const int P = int(d.size());
  MT_CHECK(P >= 2 && c.size() == d.size() && X.size() == d.size(), "parts pass: ", P,
           " dispatches, ", c.size(), " combines, ", X.size(), " expert calls");
  const auto over = [](double x) { return std::max(0.0, x); };
  // Part 0's rows travel alone, under the first local work.
  const double first = over(d[0] - p.first);
  // Between the parts' experts: under part 0's, dispatch 1 alone; under part q's, combine
  // q-1 then dispatch q+1, queued in that order.
  double between = over(d[1] - X[0]);
  for (int q = 1; q + 1 < P; ++q) between += over(c[q - 1] + d[q + 1] - X[q]);
  // Combine P-2 starts when the last part's experts do (its turn on the channel comes after
  // dispatch P-1, which step P-1 waited for); combine P-1 after it, or after those experts.
  const double last = over(over(c[P - 2] - X[P - 1]) + c[P - 1] - p.last);
  return first + between + last;
}

}  // namespace mt::plan
