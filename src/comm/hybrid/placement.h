// Where a hybrid world's ranks live: process p runs world ranks p*K .. p*K+K-1 as threads
// (K = --ranks-per-process). Pure functions, shared by the backend and by the checks and
// the layout report that run before any rank starts (parallel/process_layout.h).
#pragma once

#include <vector>

namespace mt::hybrid {

inline int process_of(int world_rank, int ranks_per_process) {
  return world_rank / ranks_per_process;
}

// How a group's members (world ranks, ascending) fall on processes. Members are then
// process-major: group rank g = (index of its process in `processes`) * per_process + the
// member's index among its process's members.
struct GroupSpan {
  std::vector<int> processes;  // processes holding members, ascending
  int per_process = 0;         // members in each of them; 0 when the counts differ
  bool uneven() const { return per_process == 0; }
  bool crosses_processes() const { return processes.size() > 1; }
};

inline GroupSpan group_span(const std::vector<int>& members, int ranks_per_process) {
  GroupSpan s;
  std::vector<int> counts;
  for (int m : members) {
    const int p = process_of(m, ranks_per_process);
    if (s.processes.empty() || s.processes.back() != p) {
      s.processes.push_back(p);
      counts.push_back(0);
    }
    ++counts.back();
  }
  s.per_process = counts.empty() ? 0 : counts.front();
  for (int c : counts)
    if (c != s.per_process) s.per_process = 0;
  return s;
}

}  // namespace mt::hybrid
