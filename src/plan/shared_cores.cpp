// Local, more rank threads than cores: the pipeline replayed with the computing stages
// sharing the cores (time_model.h).
#include <algorithm>
#include <map>

#include "core/error.h"
#include "plan/time_model.h"

namespace mt::plan {

namespace {

// compute_rates' share of one core's rate with `busy` threads computing: 1 at one core,
// linear down to the calibrated parallel efficiency at every core (0: no figure, 1).
double busy_share(double efficiency, double cores, double busy) {
  if (efficiency <= 0 || cores <= 1) return 1;
  return 1 - (1 - efficiency) * (std::clamp(busy, 1.0, cores) - 1) / (cores - 1);
}

}  // namespace

double busy_speedup(double efficiency, double cores, double priced, double busy) {
  return busy_share(efficiency, cores, busy) / busy_share(efficiency, cores, priced);
}

double shared_cores_makespan(const Schedule& s, const std::vector<OpCosts>& costs, double width,
                             double cores, double efficiency, std::vector<int>* blocked) {
  MT_CHECK(int(s.actions.size()) == s.stages && int(costs.size()) == s.stages);
  const size_t P = size_t(s.stages);
  std::vector<size_t> pc(P, 0);
  std::vector<double> left(P, -1);  // full-speed seconds left of the running action; -1: none
  std::map<MessageKey, double> arrival;
  std::vector<size_t> counted(P, size_t(-1));  // the receive last counted as blocking
  if (blocked) blocked->assign(P, 0);
  double now = 0;
  for (;;) {
    // Every stage runs its sends and arrived receives and starts its next computation (until
    // none can: a send may release a receive of a stage already passed).
    double next_arrival = 1e300;
    bool done = true;
    for (bool progress = true; progress;) {
      progress = false;
      next_arrival = 1e300;
      done = true;
      for (size_t st = 0; st < P; ++st) {
        const auto& list = s.actions[st];
        for (; pc[st] < list.size() && left[st] < 0; ++pc[st]) {
          const Action& a = list[pc[st]];
          if (is_recv(a.kind)) {
            auto it = arrival.find(message_key(s, int(st), a));
            if (it == arrival.end()) break;
            if (it->second > now) {
              next_arrival = std::min(next_arrival, it->second);
              break;
            }
          } else if (is_send(a.kind)) {
            arrival.emplace(message_key(s, int(st), a), now + costs[st].latency);
          } else {
            left[st] = action_cost(s, a.kind, costs[st]);
            progress = true;
            break;
          }
          progress = true;
        }
        done = done && pc[st] == list.size();
      }
    }
    if (done) return now;
    // A stage stopped at a receive whose message is not yet sent blocks (its threads sleep
    // until the sender rings them): counted once per receive (rank_waits.h).
    for (size_t st = 0; blocked && st < P; ++st)
      if (left[st] < 0 && pc[st] < s.actions[st].size() && counted[st] != pc[st] &&
          is_recv(s.actions[st][pc[st]].kind) &&
          !arrival.count(message_key(s, int(st), s.actions[st][pc[st]])))
        counted[st] = pc[st], ++(*blocked)[st];
    int running = 0;
    for (size_t st = 0; st < P; ++st) running += left[st] >= 0;
    // The costs are every stage's rate with all its threads computing at once (compute_rates
    // at min(P width, cores) busy); while fewer compute, each of them is that much faster.
    const double rate =
        running ? std::min(1.0, cores / (running * width)) *
                      busy_speedup(efficiency, cores, double(P) * width, running * width)
                : 1.0;
    double dt = next_arrival - now;
    for (size_t st = 0; st < P; ++st)
      if (left[st] >= 0) dt = std::min(dt, left[st] / rate);
    MT_CHECK(dt < 1e299, "shared_cores_makespan: the schedule deadlocks");
    now += dt;
    for (size_t st = 0; st < P; ++st) {
      if (left[st] < 0) continue;
      left[st] -= dt * rate;
      if (left[st] <= 1e-15) left[st] = -1, ++pc[st];  // finished: on to its next action
    }
  }
}

}  // namespace mt::plan
