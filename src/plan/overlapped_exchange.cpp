#include "plan/overlapped_exchange.h"

#include <algorithm>

#include "core/error.h"

namespace mt::plan {

namespace {

// The rank's compute and the ep group's one channel, served in issue order.
struct Timeline {
  double now = 0, link = 0, waited = 0;
  // Starts an exchange of `seconds`: it travels once the channel has served the earlier
  // ones. Returns when it is in.
  double issue(double seconds) {
    link = std::max(now, link) + seconds;
    return link;
  }
  void wait_for(double done) {
    if (done > now) waited += done - now, now = done;
  }
};

}  // namespace

double exposed_parts_exchange(const PartsPass& p) {
  const std::vector<double>&d = p.dispatch, &c = p.combine, &X = p.experts;
  const int P = int(d.size());
  MT_CHECK(P >= 2 && c.size() == d.size() && X.size() == d.size(), "parts pass: ", P,
           " dispatches, ", c.size(), " combines, ", X.size(), " expert calls");
  Timeline t;
  std::vector<double> arrived(size_t(P), 0);
  // Phase: parts 0 and 1 leave together, under the first local work.
  arrived[0] = t.issue(d[0]);
  arrived[1] = t.issue(d[1]);
  t.now += p.first;
  // Phase: part q's rows in, part q+2's out, part q's experts, part q's results out.
  double back = 0;
  for (int q = 0; q < P; ++q) {
    t.wait_for(arrived[size_t(q)]);
    if (q + 2 < P) arrived[size_t(q + 2)] = t.issue(d[size_t(q + 2)]);
    t.now += X[size_t(q)];
    back = t.issue(c[size_t(q)]);
  }
  // Phase: the last local work, then the combines, the last one in last.
  t.now += p.last;
  t.wait_for(back);
  return t.waited;
}

}  // namespace mt::plan
