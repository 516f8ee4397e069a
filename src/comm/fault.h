// Fault injection for tests and chaos runs (docs/contracts.md §8):
//   MESHTRAIN_FAULT=rank:R:step:S  makes global rank R fail at step S.
#pragma once

#include <string>

#include "comm/world.h"

namespace mt {

struct FaultSpec {
  int rank = -1;
  int step = -1;
  bool enabled() const { return rank >= 0; }
};

// Parses "rank:R:step:S" (R, S non-negative integers); empty means no fault.
// Anything else is a UsageError.
FaultSpec parse_fault_spec(const std::string& text);
// Reads MESHTRAIN_FAULT from the environment (unset or empty: no fault).
FaultSpec fault_spec_from_env();

// Called by the trainer at every step. On the chosen rank and step it fails: throws
// RuntimeError("rank R: injected fault at step S") on the local backend (the job then
// stops every rank), prints that line to stderr and exits with code 1 on the MPI backend
// (the launcher then tears the job down, as for a crashed process).
void maybe_inject_fault(const FaultSpec& spec, int global_rank, int step, CommWorld& world);

}  // namespace mt
