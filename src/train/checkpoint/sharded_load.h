// Loading a sharded checkpoint (sharded_checkpointer.h writes them) into a session of any
// layout: each rank reads only the global elements its own layout needs.
#pragma once

#include "train/session.h"

namespace mt {

// Restores --load DIR (a sharded checkpoint) into the session: weights, both moments,
// router biases, data position, step. Each rank reads only the blocks holding its own
// elements. Throws UsageError naming the file and tensor when the checkpoint does not fit
// this model or is damaged. Collective over dp (ZeRO 1-2 all-gather the loaded chunks).
void load_sharded_session(Session& s);

}  // namespace mt
