// The rules of --cp (docs/contracts.md §11, docs/context_parallel.md): what context parallelism
// composes with so far, each refusal one line naming the missing composition.
#pragma once

#include <string>

#include "train/options.h"

namespace mt {

// "--pp x --dp x --tp", with " x --cp" in its place when --cp > 1: the flags whose product
// is the world, for messages.
std::string world_flags_text(const ParallelOptions& p);

// Throws UsageError (exit 2) before any rank starts.
void validate_context_parallel(const TrainOptions& o);

}  // namespace mt
