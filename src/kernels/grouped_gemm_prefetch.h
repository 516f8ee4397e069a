// Hides the memory reads of a grouped GEMM's next item behind the current one (internal).
// An item first packs its block of B: for the forward and input-gradient products that is an
// expert's weight, which has not been touched since the last call and comes from L3 or
// DRAM. Read in one go it stalls the core for as long as a fifth of the item's compute;
// requested into L2 a line at a time by the micro-kernels of the item before, it arrives
// while they compute. The same for the next item's A rows.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/grouped_gemm_work.h"

namespace mt::grouped {

// rows of row_bytes, stride bytes apart.
struct Region {
  const char* base = nullptr;
  size_t row_bytes = 0, stride = 0;
  int rows = 0;
};

// The memory an item's B and A operands read.
template <typename T>
Region b_region(const Operands<T>& o, const Item& it) {
  if (o.b_trans)
    return {reinterpret_cast<const char*>(o.b + it.n0 * o.ldb), size_t(o.K) * sizeof(T),
            o.ldb * sizeof(T), it.n1 - it.n0};
  return {reinterpret_cast<const char*>(o.b + it.n0), size_t(it.n1 - it.n0) * sizeof(T),
          o.ldb * sizeof(T), o.K};
}

template <typename T>
Region a_region(const Operands<T>& o) {
  return {reinterpret_cast<const char*>(o.a), size_t(o.a_trans ? o.M : o.K) * sizeof(T),
          o.lda * sizeof(T), o.a_trans ? o.K : o.M};
}

// A contiguous run of lines to prefetch, handed to one micro-kernel call, which spreads
// them over its steps in K: issued in bursts between calls instead, the requests fill the
// core's line-fill buffers and stall it (measured: 12% of an fp32 call's time).
struct Piece {
  const char* at = nullptr;
  int lines = 0;
};

class Prefetcher {
 public:
  // Spreads the lines of b then a over `calls` calls of take().
  void start(const Region& b, const Region& a, int64_t calls) {
    region_[0] = b, region_[1] = a, at_ = 0, row_ = 0, offset_ = 0;
    const size_t lines = (b.row_bytes / 64 + 1) * b.rows + (a.row_bytes / 64 + 1) * a.rows;
    per_call_ = int(lines / size_t(calls > 0 ? calls : 1)) + 1;
  }
  void stop() { at_ = 2; }
  // The next lines for one call: at most `most`, within one row of a region.
  Piece take(int most) {
    while (at_ < 2 && row_ >= region_[at_].rows) ++at_, row_ = 0, offset_ = 0;
    if (at_ == 2) return {};
    const Region& r = region_[at_];
    const int left = int((r.row_bytes - offset_ + 63) / 64);
    const int n = std::min(std::min(most, per_call_), left);
    const Piece piece{r.base + row_ * r.stride + offset_, n};
    offset_ += size_t(n) * 64;
    if (offset_ >= r.row_bytes) offset_ = 0, ++row_;
    return piece;
  }

 private:
  Region region_[2];
  int at_ = 2, row_ = 0, per_call_ = 0;
  size_t offset_ = 0;
};

}  // namespace mt::grouped
