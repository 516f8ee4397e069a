#include "schedule/schedule_simulator.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace mt {

double action_cost(const Schedule& s, ActionKind k, const OpCosts& c) {
  switch (k) {
    case ActionKind::F:
      return c.forward;
    case ActionKind::B:
      return s.split_backward ? c.backward : c.backward + c.weight;
    case ActionKind::W:
      return c.weight;
    default:
      return 0;  // transfers take no compute time (asynchronous)
  }
}

double Timeline::total_idle() const {
  double t = 0;
  for (size_t st = 0; st < busy.size(); ++st) t += idle(static_cast<int>(st));
  return t;
}

double Timeline::bubble() const {
  if (busy.empty() || makespan <= 0) return 0;
  return total_idle() / (static_cast<double>(busy.size()) * makespan);
}

// Replays the stages round-robin, each as far as it can go; the times do not depend on the
// replay order because a stage only ever waits for one specific message.
Timeline simulate_schedule(const Schedule& s, const OpCosts& costs) {
  return simulate_schedule(s, std::vector<OpCosts>(size_t(std::max(s.stages, 0)), costs));
}

Timeline simulate_schedule(const Schedule& s, const std::vector<OpCosts>& stage_costs) {
  MT_CHECK(static_cast<int>(s.actions.size()) == s.stages);
  MT_CHECK(static_cast<int>(stage_costs.size()) == s.stages);
  Timeline t;
  t.stages.resize(s.stages);
  t.busy.assign(s.stages, 0.0);
  std::vector<size_t> pc(s.stages, 0);
  std::vector<double> clock(s.stages, 0.0);
  std::map<MessageKey, double> arrival;
  for (bool progress = true; progress;) {
    progress = false;
    for (int st = 0; st < s.stages; ++st) {
      const auto& list = s.actions[st];
      const OpCosts& costs = stage_costs[size_t(st)];
      for (; pc[st] < list.size(); ++pc[st]) {
        const Action& a = list[pc[st]];
        double start = clock[st], end = start;
        if (is_recv(a.kind)) {
          auto it = arrival.find(message_key(s, st, a));
          if (it == arrival.end()) break;
          start = end = std::max(start, it->second);
        } else if (is_send(a.kind)) {
          arrival.emplace(message_key(s, st, a), start + costs.latency);
        } else {
          end = start + action_cost(s, a.kind, costs);
          t.busy[st] += end - start;
        }
        t.stages[st].push_back({static_cast<int>(pc[st]), start, end});
        clock[st] = end;
        t.makespan = std::max(t.makespan, end);
        progress = true;
      }
    }
  }
  for (int st = 0; st < s.stages; ++st) {
    if (pc[st] == s.actions[st].size()) continue;
    t.deadlocked = true;
    t.stuck += str(t.stuck.empty() ? "" : ", ", "stage ", st, " waits at ",
                   to_string(s.actions[st][pc[st]]));
  }
  return t;
}

double closed_form_bubble(const std::string& schedule, int p, int m, int v) {
  if (schedule == "gpipe" || schedule == "1f1b") return double(p - 1) / double(m + p - 1);
  if (schedule == "interleaved") return double(p - 1) / double(v * m + p - 1);
  return -1;
}

}  // namespace mt
