// Activation recomputation (--recompute, docs/recomputation.md): what a block keeps per
// microbatch for its backward, and what its backward computes again.
//   none      everything the backward reads is kept in the microbatch's slot.
//   selective the attention core's probabilities (b, NH, T, T) are not kept: B runs the
//             attention core again (QK^T, softmax, probabilities x V) from the kept qkv.
//   full      only the block's input is kept: B runs the whole block forward again into
//             scratch shared by the chunk's blocks, then its W at once (the recomputed
//             tensors do not outlive the block's backward).
// The recomputation runs the same kernels on the same inputs, so it is exact.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class Recompute { none, selective, full };

// The names --recompute takes, in --help's order.
inline std::vector<std::pair<std::string, Recompute>> recompute_names() {
  return {
      {"none", Recompute::none}, {"selective", Recompute::selective}, {"full", Recompute::full}};
}

inline const char* recompute_name(Recompute r) {
  return r == Recompute::full ? "full" : r == Recompute::selective ? "selective" : "none";
}

// "none" | "selective" | "full"; false for anything else.
inline bool parse_recompute(const std::string& s, Recompute* out) {
  if (s == "none") {
    *out = Recompute::none;
  } else if (s == "selective") {
    *out = Recompute::selective;
  } else if (s == "full") {
    *out = Recompute::full;
  } else {
    return false;
  }
  return true;
}

}  // namespace mt
