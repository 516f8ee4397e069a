// Causal masking by positions for flash attention's drivers: key j is visible to query i iff
// kpos[j] <= qpos[i]. A (query block, key block) pair is classified from the blocks' position
// ranges, so any order of positions works (one worker's 0..T-1, a zigzag rank's two chunks,
// a ring step's visiting block); only blocks straddling the causal boundary pay for masks.
#pragma once

#include <climits>
#include <optional>

#include "kernels/flash_attention.h"

namespace mt::flash {

enum class Visibility { none, partial, full };

// The positions of one key block, padded with INT_MAX (never visible) past its last key.
struct KeyBlock {
  int n = 0;  // keys in the block (< kFlashKeyBlock only for the last one)
  int kmin = INT_MAX, kmax = INT_MIN;
  int pos[kFlashKeyBlock];
};

inline KeyBlock key_block(const int* kpos, int Tk, int kb) {
  KeyBlock k;
  const int j0 = kb * kFlashKeyBlock;
  k.n = Tk - j0 < kFlashKeyBlock ? Tk - j0 : kFlashKeyBlock;
  for (int j = 0; j < kFlashKeyBlock; j++) {
    k.pos[j] = j < k.n ? kpos[j0 + j] : INT_MAX;
    if (j < k.n) {
      k.kmin = k.pos[j] < k.kmin ? k.pos[j] : k.kmin;
      k.kmax = k.pos[j] > k.kmax ? k.pos[j] : k.kmax;
    }
  }
  return k;
}

struct QueryRange {
  int qmin = INT_MAX, qmax = INT_MIN;
};

inline QueryRange query_range(const int* qpos, int rows) {
  QueryRange q;
  for (int i = 0; i < rows; i++) {
    q.qmin = qpos[i] < q.qmin ? qpos[i] : q.qmin;
    q.qmax = qpos[i] > q.qmax ? qpos[i] : q.qmax;
  }
  return q;
}

// full: every key visible to every row (no mask); none: the pair is skipped.
inline Visibility visibility(const KeyBlock& k, const QueryRange& q) {
  if (k.n <= 0 || k.kmin > q.qmax) return Visibility::none;
  if (k.kmax <= q.qmin && k.n == kFlashKeyBlock) return Visibility::full;
  return Visibility::partial;
}

// The rows [begin, end) of a query block that see some key of a block (rows outside see
// none: their statistics stay as they are).
struct RowSpan {
  int begin, end;
};

inline RowSpan rows_seeing(const KeyBlock& k, Visibility vis, const int* qpos, int rows) {
  if (vis == Visibility::full) return {0, rows};
  RowSpan span{rows, 0};
  for (int r = 0; r < rows; r++)
    if (qpos[r] >= k.kmin) {
      span.begin = r < span.begin ? r : span.begin;
      span.end = r + 1;
    }
  return span;
}

// The probabilities' dropout mask of a call (flash_attention.h), or none.
inline std::optional<DropoutMask> dropout_mask(const FlashDropout& d) {
  if (!d.on()) return std::nullopt;
  return DropoutMask(d.key, d.p);
}

}  // namespace mt::flash
