// Validation loss of a session: forward only, on the validation loader's first batches.
#pragma once

#include "train/session.h"

namespace mt {

// Mean token cross-entropy over --eval-batches global batches of the validation data
// (from its start), the same on every rank. Routing statistics are not recorded (they
// cover training forwards only). Collective over the world.
double evaluate(Session& s);

}  // namespace mt
