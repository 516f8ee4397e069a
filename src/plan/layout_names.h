// The layout knobs' names as `meshtrain plan` and `--compare` take them, parsed once into the
// engine's own enums (Recompute, Precision, CpComm) with train's wording; and back to names
// for tables, JSON and the printed `train` command.
#pragma once

#include <string>

#include "model/context_parallel_shard.h"
#include "model/precision.h"
#include "model/recompute.h"

namespace mt::plan {

// UsageError `--recompute must be none, selective or full (got 'x')` for anything else.
Recompute recompute_of(const std::string& name);
// UsageError `--precision must be fp32 or bf16 (got 'x')`.
Precision precision_of(const std::string& name);
// UsageError `--cp-comm must be ring or allgather (got 'x')`.
CpComm cp_comm_of(const std::string& name);

}  // namespace mt::plan
