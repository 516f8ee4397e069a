#include "schedule/schedule_validator.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"
#include "schedule/schedule_simulator.h"

namespace mt {

namespace {

constexpr size_t kMaxErrors = 40;

// Positions of each action on one stage, keyed by (kind, microbatch, chunk).
using Key = std::tuple<ActionKind, int, int>;

class Checker {
 public:
  explicit Checker(const Schedule& s) : s_(s) {}

  ValidationReport run() {
    if (static_cast<int>(s_.actions.size()) != s_.stages) {
      fail(str("schedule has ", s_.actions.size(), " action lists for ", s_.stages, " stages"));
      return std::move(r_);
    }
    for (int st = 0; st < s_.stages; ++st) check_stage(st);
    check_pairing();
    if (r_.ok()) check_deadlock();
    for (int st = 0; st < s_.stages; ++st) r_.peak_in_flight.push_back(peak_in_flight(st));
    return std::move(r_);
  }

 private:
  void fail(std::string msg) {
    if (r_.errors.size() < kMaxErrors) r_.errors.push_back(std::move(msg));
  }

  bool in_range(int mb, int chunk) const {
    return mb >= 0 && mb < s_.microbatches && chunk >= 0 && chunk < s_.chunks;
  }

  bool well_formed(int st, const Action& a) {
    const bool fb_ok = a.kind != ActionKind::FB || in_range(a.b_microbatch, a.b_chunk);
    if (!in_range(a.microbatch, a.chunk) || !fb_ok) {
      fail(str("stage ", st, ": ", to_string(a), " out of range"));
      return false;
    }
    const int k = s_.model_chunk(st, a.chunk), last = s_.model_chunks() - 1;
    int expected_peer = -1;
    bool exists = true;
    switch (a.kind) {
      case ActionKind::SEND_ACT:
      case ActionKind::RECV_GRAD:
        exists = k < last;
        if (exists) expected_peer = s_.stage_of(k + 1);
        break;
      case ActionKind::RECV_ACT:
      case ActionKind::SEND_GRAD:
        exists = k > 0;
        if (exists) expected_peer = s_.stage_of(k - 1);
        break;
      default:
        break;
    }
    if (!exists || a.peer != expected_peer || (a.peer == st && !is_compute(a.kind))) {
      fail(str("stage ", st, ": ", to_string(a), " has no such peer (model chunk ", k, " of ",
               last + 1, ")"));
      return false;
    }
    return true;
  }

  void check_stage(int st) {
    std::map<Key, int> pos;
    const auto& list = s_.actions[st];
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (!well_formed(st, a)) continue;
      // An FB stands for its two halves, both at its position.
      const bool fb = a.kind == ActionKind::FB;
      for (const Action& h :
           fb ? std::vector<Action>{forward_half(a), backward_half(a)} : std::vector<Action>{a})
        if (!pos.emplace(Key{h.kind, h.microbatch, h.chunk}, i).second)
          fail(str("stage ", st, ": ", to_string(h), " appears more than once"));
    }
    auto at = [&](ActionKind k, int mb, int c) {
      auto it = pos.find({k, mb, c});
      return it == pos.end() ? -1 : it->second;
    };
    // `first` must exist and come before `then` (which, if it exists, is at index then_pos);
    // at the same position means both are halves of one FB, which runs them as a pair.
    auto before = [&](ActionKind k, int mb, int c, int then_pos, const Action& then) {
      const int p = at(k, mb, c);
      if (p < 0 || p >= then_pos)
        fail(str("stage ", st, ": ", to_string(then), " runs before ",
                 to_string(Action{k, mb, c, is_compute(k) ? -1 : peer_for(st, k, c)})));
    };
    for (int c = 0; c < s_.chunks; ++c) {
      const int k = s_.model_chunk(st, c), last = s_.model_chunks() - 1;
      const bool prev_local = k > 0 && s_.stage_of(k - 1) == st;
      const bool next_local = k < last && s_.stage_of(k + 1) == st;
      for (int mb = 0; mb < s_.microbatches; ++mb) {
        const int f = at(ActionKind::F, mb, c), b = at(ActionKind::B, mb, c);
        const int w = at(ActionKind::W, mb, c);
        const Action fa{ActionKind::F, mb, c, -1}, ba{ActionKind::B, mb, c, -1};
        if (f < 0) fail(str("stage ", st, ": missing ", to_string(fa)));
        if (b < 0) fail(str("stage ", st, ": missing ", to_string(ba)));
        if (s_.split_backward && w < 0)
          fail(str("stage ", st, ": missing ", to_string(Action{ActionKind::W, mb, c, -1})));
        if (!s_.split_backward && w >= 0)
          fail(str("stage ", st, ": W", mb, " in a schedule with fused backward"));
        if (f >= 0 && k > 0) {
          if (prev_local)
            before(ActionKind::F, mb, s_.local_chunk_of(k - 1), f, fa);
          else
            before(ActionKind::RECV_ACT, mb, c, f, fa);
        }
        if (b >= 0) {
          before(ActionKind::F, mb, c, b, ba);
          if (k < last) {
            if (next_local)
              before(ActionKind::B, mb, s_.local_chunk_of(k + 1), b, ba);
            else
              before(ActionKind::RECV_GRAD, mb, c, b, ba);
          }
        }
        if (w >= 0) before(ActionKind::B, mb, c, w, Action{ActionKind::W, mb, c, -1});
        // Every cross-stage edge needs its send, after the op that produced the tensor.
        if (k < last && !next_local) {
          const int sa = at(ActionKind::SEND_ACT, mb, c);
          if (sa < 0)
            fail(str("stage ", st, ": F", mb, " chunk ", c, " output never sent"));
          else
            before(ActionKind::F, mb, c, sa, list[sa]);
        }
        if (k > 0 && !prev_local) {
          const int sg = at(ActionKind::SEND_GRAD, mb, c);
          if (sg < 0)
            fail(str("stage ", st, ": B", mb, " chunk ", c, " gradient never sent"));
          else
            before(ActionKind::B, mb, c, sg, list[sg]);
        }
      }
    }
  }

  int peer_for(int st, ActionKind k, int c) const {
    const int mc = s_.model_chunk(st, c);
    const bool down = k == ActionKind::SEND_ACT || k == ActionKind::RECV_GRAD;
    const int other = down ? mc + 1 : mc - 1;
    return other < 0 || other >= s_.model_chunks() ? -1 : s_.stage_of(other);
  }

  void check_pairing() {
    std::map<MessageKey, std::pair<int, int>> count;  // sends, recvs
    for (int st = 0; st < s_.stages; ++st)
      for (const Action& a : s_.actions[st]) {
        if (is_compute(a.kind) || a.chunk < 0 || a.chunk >= s_.chunks) continue;
        auto& c = count[message_key(s_, st, a)];
        (is_send(a.kind) ? c.first : c.second)++;
      }
    for (const auto& [key, c] : count)
      if (c.first != 1 || c.second != 1)
        fail(str(key.grad ? "gradient" : "activation", " of microbatch ", key.microbatch,
                 " for model chunk ", key.dest_model_chunk, ": ", c.first, " send(s), ", c.second,
                 " receive(s)"));
  }

  void check_deadlock() {
    const Timeline t = simulate_schedule(s_, OpCosts{});
    if (t.deadlocked) fail("deadlock: " + t.stuck);
  }

  int peak_in_flight(int st) const {
    const ActionKind release = s_.split_backward ? ActionKind::W : ActionKind::B;
    int live = 0, peak = 0;
    for (const Action& a : s_.actions[st]) {
      // An FB's F half runs before its B half (execution_order.h).
      if (a.kind == ActionKind::F || a.kind == ActionKind::FB) peak = std::max(peak, ++live);
      if (a.kind == release || (a.kind == ActionKind::FB && release == ActionKind::B)) --live;
    }
    return peak;
  }

  const Schedule& s_;
  ValidationReport r_;
};

}  // namespace

std::string ValidationReport::summary() const {
  std::string out;
  for (const auto& e : errors) out += e + "\n";
  return out;
}

ValidationReport validate_schedule(const Schedule& s) {
  return Checker(s).run();
}

void require_valid_schedule(const Schedule& s) {
  const ValidationReport r = validate_schedule(s);
  if (!r.ok())
    throw RuntimeError(str("schedule ", s.name, " (pp ", s.stages, ", microbatches ",
                           s.microbatches, ", virtual stages ", s.chunks, ") is invalid:\n",
                           r.summary()));
}

}  // namespace mt
