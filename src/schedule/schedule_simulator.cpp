#include "schedule/schedule_simulator.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "schedule/execution_order.h"
#include "schedule/grad_sync_points.h"

namespace mt {

double action_cost(const Schedule& s, ActionKind k, const OpCosts& c) {
  switch (k) {
    case ActionKind::F:
      return c.forward;
    case ActionKind::B:
      return s.split_backward ? c.backward : c.backward + c.weight;
    case ActionKind::W:
      return c.weight;
    case ActionKind::FB:
      return c.forward + (s.split_backward ? c.backward : c.backward + c.weight);
    default:
      return 0;  // transfers take no compute time (asynchronous)
  }
}

double Timeline::total_idle() const {
  double t = 0;
  for (size_t st = 0; st < busy.size(); ++st) t += idle(static_cast<int>(st));
  return t;
}

double Timeline::synced_end() const {
  double end = makespan;
  for (double f : finish) end = std::max(end, f);
  return end;
}

double Timeline::bubble() const {
  if (busy.empty() || makespan <= 0) return 0;
  return total_idle() / (static_cast<double>(busy.size()) * makespan);
}

namespace {

// One stage replaying its execution order.
struct StageRun {
  std::vector<ExecStep> steps;
  size_t pc = 0;
  double clock = 0;
  // The FB between its halves: its F half's start and end, when its B half's input is in,
  // and its entry in the timeline.
  double f_start = 0, f_end = 0, b_ready = 0;
  size_t fb_entry = 0;
  GradSyncPoints sync{};
  double comm_free = 0;  // when the stage's communication stream has run its syncs
};

class Replay {
 public:
  Replay(const Schedule& s, const std::vector<OpCosts>& costs) : s_(s), costs_(costs) {
    t_.stages.resize(size_t(s.stages));
    t_.busy.assign(size_t(s.stages), 0.0);
    for (int st = 0; st < s.stages; ++st) {
      runs_.push_back({execution_order(s, st)});
      const OpCosts::GradSync& g = costs_[size_t(st)].sync;
      if (g.on) runs_.back().sync = grad_sync_points(s, st, runs_.back().steps, g.delay);
    }
  }

  // Replays the stages round-robin, each as far as it can go; the times do not depend on
  // the replay order because a stage only ever waits for one specific message.
  Timeline run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int st = 0; st < s_.stages; ++st)
        while (runs_[size_t(st)].pc < runs_[size_t(st)].steps.size() && step(st)) progress = true;
    }
    for (int st = 0; st < s_.stages; ++st) {
      StageRun& r = runs_[size_t(st)];
      start_syncs(st, r.sync.at_end, r.clock, 0);
      t_.finish.push_back(std::max(r.clock, r.comm_free));
      if (r.pc == r.steps.size()) continue;
      t_.deadlocked = true;
      t_.stuck += str(t_.stuck.empty() ? "" : ", ", "stage ", st, " waits at ",
                      to_string(s_.actions[size_t(st)][size_t(r.steps[r.pc].index)]));
    }
    return std::move(t_);
  }

 private:
  // Runs stage st's next step; false when it must wait for a message.
  bool step(int st) {
    StageRun& r = runs_[size_t(st)];
    const ExecStep& e = r.steps[r.pc];
    const Action& a = s_.actions[size_t(st)][size_t(e.index)];
    const OpCosts& c = costs_[size_t(st)];
    double start = r.clock, end = r.clock;
    if (is_recv(a.kind)) {
      auto it = arrival_.find(message_key(s_, st, a));
      if (it == arrival_.end()) return false;
      start = end = std::max(r.clock, it->second);
      if (e.inside_fb)
        r.b_ready = std::max(r.b_ready, it->second);  // the B half waits, not the stage
      else
        r.clock = end;
    } else if (is_send(a.kind)) {
      if (e.inside_fb) start = end = r.f_end;  // the F half's output leaves at once
      arrival_.emplace(message_key(s_, st, a), start + c.latency);
    } else if (e.half == Half::forward) {
      r.f_start = r.clock;
      r.f_end = r.clock + c.forward;
      r.b_ready = r.f_start;  // unless a receive inside the FB says later
      r.fb_entry = t_.stages[size_t(st)].size();
      t_.stages[size_t(st)].push_back({e.index, r.f_start, r.f_end, r.f_end, r.f_end});
      t_.makespan = std::max(t_.makespan, r.f_end);
      ++r.pc;
      return true;
    } else if (e.half == Half::backward) {
      finish_fb(st, a, c);
      if (c.sync.on && !r.sync.after_step[r.pc].empty())
        start_syncs(st, r.sync.after_step[r.pc], r.clock, own_last_cost(st, a, c));
      ++r.pc;
      return true;
    } else {
      end = start + action_cost(s_, a.kind, c);
      t_.busy[size_t(st)] += end - start;
      r.clock = end;
      if (c.sync.on && !r.sync.after_step[r.pc].empty())
        start_syncs(st, r.sync.after_step[r.pc], end, own_last_cost(st, a, c));
    }
    t_.stages[size_t(st)].push_back({e.index, start, end, end, end});
    t_.makespan = std::max(t_.makespan, end);
    ++r.pc;
    return true;
  }

  // The cost of the gradient computation a delay-0 sync starts from (its collective may
  // start `hidden` of it early); 0 for a later point.
  double own_last_cost(int st, const Action& a, const OpCosts& c) const {
    const StageRun& r = runs_[size_t(st)];
    if (!r.sync.own_last[r.pc]) return 0;
    return action_cost(s_, a.kind == ActionKind::FB ? ActionKind::B : a.kind, c);
  }

  // Starts the syncs of `chunks` on stage st at time `at` (the stage's clock there): each
  // chunk's passes on the compute stream, then its collective once they are done and the
  // stream's collectives before it are, or (a hooked sync) up to `hidden` x `computation`
  // earlier: the buckets' passes and collectives interleave with the backward.
  void start_syncs(int st, const std::vector<int>& chunks, double at, double computation) {
    const OpCosts::GradSync& g = costs_[size_t(st)].sync;
    StageRun& r = runs_[size_t(st)];
    r.clock = std::max(r.clock, at);
    for (size_t i = 0; i < chunks.size(); ++i) {
      r.clock += g.pass;
      t_.busy[size_t(st)] += g.pass;
      const double ready = r.clock - std::clamp(g.hidden, 0.0, 1.0) * computation;
      r.comm_free = std::max(r.comm_free, std::max(ready, 0.0)) + g.reduce;
    }
  }

  // The B half may start fb_overlap * min(F, B) before the F half ends, once its input is in.
  void finish_fb(int st, const Action& a, const OpCosts& c) {
    StageRun& r = runs_[size_t(st)];
    const double b_cost = action_cost(s_, ActionKind::B, c);
    const double hidden = std::clamp(c.fb_overlap, 0.0, 1.0) * std::min(c.forward, b_cost);
    const double b_start = std::max(r.f_end - hidden, r.b_ready);
    const double b_end = b_start + b_cost;
    const double both = std::max(0.0, std::min(r.f_end, b_end) - std::max(r.f_start, b_start));
    t_.busy[size_t(st)] += (r.f_end - r.f_start) + b_cost - both;
    TimedAction& ta = t_.stages[size_t(st)][r.fb_entry];
    MT_CHECK(ta.index >= 0 && s_.actions[size_t(st)][size_t(ta.index)] == a);
    ta.b_start = b_start;
    ta.end = std::max(r.f_end, b_end);
    r.clock = ta.end;
    t_.makespan = std::max(t_.makespan, ta.end);
  }

  const Schedule& s_;
  const std::vector<OpCosts>& costs_;
  std::vector<StageRun> runs_;
  std::map<MessageKey, double> arrival_;
  Timeline t_;
};

}  // namespace

Timeline simulate_schedule(const Schedule& s, const OpCosts& costs) {
  return simulate_schedule(s, std::vector<OpCosts>(size_t(std::max(s.stages, 0)), costs));
}

Timeline simulate_schedule(const Schedule& s, const std::vector<OpCosts>& stage_costs) {
  MT_CHECK(static_cast<int>(s.actions.size()) == s.stages);
  MT_CHECK(static_cast<int>(stage_costs.size()) == s.stages);
  return Replay(s, stage_costs).run();
}

double closed_form_bubble(ScheduleKind schedule, int p, int m, int v) {
  switch (schedule) {
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
      return double(p - 1) / double(m + p - 1);
    case ScheduleKind::interleaved:
      return double(p - 1) / double(v * m + p - 1);
    case ScheduleKind::zb_h1:
    case ScheduleKind::dualpipev:
      return -1;
  }
  return -1;
}

double dualpipe_paper_idle(int p, const OpCosts& c) {
  const double f_and_b = c.forward + c.backward + c.weight -
                         std::clamp(c.fb_overlap, 0.0, 1.0) * std::min(c.forward, c.backward);
  return double(p - 1) * (f_and_b + (c.backward + c.weight) - 3 * c.weight);
}

}  // namespace mt
