// Where the groups of a layout run on a hybrid world (--ranks-per-process K): process p
// holds world ranks p*K .. p*K+K-1, so with the mesh's tp-fastest order (docs/contracts.md §7)
// a tp group stays inside a process when tp divides K, and expert-parallel groups stay
// inside when tp*ep divides K; dp and pp groups cross processes. Pure functions: the checks
// and the report run before any rank starts (train --print-layout).
#pragma once

#include <string>
#include <vector>

#include "parallel/mesh.h"

namespace mt {

enum class GroupPlacement {
  in_process,       // every member in one process: shared memory, no MPI
  one_per_process,  // one member in each of several processes: plain MPI
  hierarchical,     // L >= 2 members in each of P >= 2 processes: intra + inter
  uneven            // different counts per process: refused
};
const char* placement_name(GroupPlacement p);

struct GroupLayout {
  GroupKind kind;
  std::vector<int> members;
  GroupPlacement placement;
  int processes = 1;  // processes it spans
};

// Every group of every kind the trainer makes (dp, tp, pp, ep, ep_replica; world), ordered
// by kind and first member. Throws UsageError when K < 1 or K does not divide the world.
std::vector<GroupLayout> process_layout(const MeshShape& shape, int ranks_per_process);

// UsageError (one line) if some group would have different numbers of members in
// different processes, naming it and suggesting a K that works.
void validate_process_layout(const MeshShape& shape, int ranks_per_process);

// The report of --print-layout: the processes and their ranks, then each group kind with
// its groups and where they run.
std::string describe_process_layout(const MeshShape& shape, int ranks_per_process);
// One line for the start-up report: each kind of group with more than one member and where
// its groups run, e.g. "hybrid: 2 processes x 2 ranks | tp inside a process | dp across
// processes (MPI)".
std::string summarize_process_layout(const MeshShape& shape, int ranks_per_process);

}  // namespace mt
