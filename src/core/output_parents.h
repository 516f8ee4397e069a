// Outputs just work (issue #31): a path such as `--metrics out/mine/metrics.jsonl` gets its
// missing folders created, as `mkdir -p` would, by the writer that opens it.
//
// The checks of core/file_checks.h run first, before any rank starts: they accept missing
// folders when the nearest existing ancestor is a writable directory, and refuse, as
// before, a path through a regular file, an unwritable directory or an output that is an
// input. So creating the folders can then fail only on an I/O error (RuntimeError, exit 1).
#pragma once

#include <string>

namespace mt {

// Creates the missing directories above `path` (the file or directory about to be written).
void create_parent_directories(const std::string& path);

}  // namespace mt
