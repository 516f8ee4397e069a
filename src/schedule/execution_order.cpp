#include "schedule/execution_order.h"

namespace mt {

namespace {

bool same(const Action& a, ActionKind kind, int mb, int chunk) {
  return a.kind == kind && a.microbatch == mb && a.chunk == chunk;
}

}  // namespace

std::vector<ExecStep> execution_order(const Schedule& s, int stage) {
  const std::vector<Action>& list = s.actions[size_t(stage)];
  const int n = int(list.size());
  std::vector<char> moved(size_t(n), 0);
  std::vector<ExecStep> out;
  out.reserve(size_t(n) + 1);
  for (int i = 0; i < n; ++i) {
    const Action& a = list[size_t(i)];
    if (moved[size_t(i)]) continue;
    if (a.kind != ActionKind::FB) {
      out.push_back({i, Half::whole, false});
      continue;
    }
    // The B half's receive among the receives just before the FB, the F half's send
    // among the sends just after it (where ScheduleBuilder puts them).
    int recv = -1, send = -1;
    for (int j = i - 1; j >= 0 && is_recv(list[size_t(j)].kind); --j)
      if (same(list[size_t(j)], ActionKind::RECV_GRAD, a.b_microbatch, a.b_chunk)) recv = j;
    for (int j = i + 1; j < n && is_send(list[size_t(j)].kind); ++j)
      if (same(list[size_t(j)], ActionKind::SEND_ACT, a.microbatch, a.chunk)) send = j;
    if (recv >= 0) {
      // Listed before the FB, so it is already in `out`: take it out again.
      for (size_t k = out.size(); k-- > 0;)
        if (out[k].index == recv) {
          out.erase(out.begin() + long(k));
          break;
        }
    }
    out.push_back({i, Half::forward, false});
    if (send >= 0) {
      out.push_back({send, Half::whole, true});
      moved[size_t(send)] = 1;
    }
    if (recv >= 0) out.push_back({recv, Half::whole, true});
    out.push_back({i, Half::backward, false});
  }
  return out;
}

}  // namespace mt
