// The shard format moved to data/ (below train/, so `meshtrain prepare` writes what the
// loader reads); this name stays for the code that includes it.
#pragma once

#include "data/token_shard.h"
