// Dropout whose mask is a pure function of what an element *is*, never of where or when it
// is computed: element (token g, feature f) of dropout site s at optimizer step t is kept
// when word f%4 of Philox4x32-10(counter = (f/4, g low, g high, s), key = mix(seed, t)) is at
// least p * 2^32, and then scaled by 1/(1-p) (inverted dropout, as torch.nn.Dropout). g is the
// token's index in the *global* batch (sequence index in the global batch * T + position),
// so a microbatch, a data-parallel slice, a sequence-parallel or context-parallel shard of
// rows, or a tensor-parallel slice of features (feature_offset) all draw the bits one worker
// would: no RNG state, no tracker. Backward regenerates the mask from the same counters
// (nothing is stored). p = 0 returns at once: the path without dropout is untouched.
//
// Sites: a caller numbers each place dropout applies (e.g. layer * 4 + {embedding,
// attention probabilities, attention residual, MLP residual}); for attention probabilities
// the feature is head * T + key position.
#pragma once

#include <cstdint>

#include "kernels/philox.h"

namespace mt {

struct DropoutKey {
  uint64_t seed = 0;
  uint64_t step = 0;  // the optimizer step: a new mask every step
  uint32_t site = 0;
};

// One (key, p)'s mask, derived once for many rows: what a kernel that draws masks inside its
// own loops (the flash attention core) holds.
class DropoutMask {
 public:
  DropoutMask(const DropoutKey& key, float p);
  bool keeps(int64_t token, int64_t feature) const;
  // x[j] *= keep(token, feature_base + offsets[j]) / (1 - p) for j < n; offsets[j] < 0 or
  // INT_MAX marks a padding lane, left as it is. One Philox call per run of four features.
  void scale_row(float* x, int n, int64_t token, int64_t feature_base, const int* offsets) const;

 private:
  PhiloxKey key_;
  uint32_t site_, threshold_;
  float scale_;
};

// Whether element (token, feature) is kept; p in [0, 1).
bool dropout_keeps(const DropoutKey& key, float p, int64_t token, int64_t feature);

// y (rows, C) = x * mask / (1 - p); row r is global token row_tokens[r], its columns are
// features feature_offset .. feature_offset + C - 1. y may be x. p = 0: y = x (a copy when
// they differ).
void dropout_forward(float* y, const float* x, int rows, int C, const int64_t* row_tokens,
                     int64_t feature_offset, const DropoutKey& key, float p);

// dx (rows, C) = dy * mask / (1 - p) with the forward's mask (the operation is linear, so its
// backward is itself). dx may be dy.
void dropout_backward(float* dx, const float* dy, int rows, int C, const int64_t* row_tokens,
                      int64_t feature_offset, const DropoutKey& key, float p);

}  // namespace mt
