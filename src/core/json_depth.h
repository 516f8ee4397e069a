// How deeply JSON text nests, found before it is parsed. nlohmann parses any depth, but
// copies, compares and prints a value recursively: one crafted line of 200,000 '[' ended
// `meshtrain report` with SIGSEGV. Every reader of JSON a user names refuses text nested
// deeper than kMaxJsonDepth first; meshtrain's own files nest 4 levels at most.
#pragma once

#include <cstddef>
#include <string_view>

namespace mt {

inline constexpr size_t kMaxJsonDepth = 64;

// The deepest nesting of [ and { in `text`, outside strings (not validated: a bracket that
// is never closed still counts).
size_t json_nesting_depth(std::string_view text);

}  // namespace mt
