// Element-wise reduction of n peer buffers into one destination, for the shared-memory
// collectives. Sources are summed in member order (0, 1, ..., n-1) so the result does not
// depend on which rank reduces which chunk.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "comm/communicator.h"

namespace mt::local {

// dst[i] = a[i] (op) b[i]; dst may alias a or b (each element is read before it is written).
template <typename T, ReduceOp Op>
inline void combine2(T* dst, const T* a, const T* b, size_t m) {
  for (size_t i = 0; i < m; ++i) {
    if constexpr (Op == ReduceOp::max) {
      dst[i] = a[i] < b[i] ? b[i] : a[i];
    } else if constexpr (Op == ReduceOp::min) {
      dst[i] = b[i] < a[i] ? b[i] : a[i];
    } else {
      dst[i] = a[i] + b[i];
    }
  }
}

// dst[0..len) = op over j of srcs[j][0..len); avg divides the sum by n (floating types).
// dst may alias any one source: a tile is read from every source before it is written.
template <typename T, ReduceOp Op>
void reduce_n(T* dst, const T* const* srcs, int n, size_t len) {
  constexpr ReduceOp kOp = Op == ReduceOp::avg ? ReduceOp::sum : Op;
  // A tile of partial results stays in L1 while the middle sources stream through it.
  constexpr size_t kTile = 4096 / sizeof(T) * 2;
  T acc[kTile];
  for (size_t b = 0; b < len; b += kTile) {
    const size_t m = std::min(kTile, len - b);
    if (n == 1) {
      if (dst != srcs[0]) std::memcpy(dst + b, srcs[0] + b, m * sizeof(T));
    } else if (n == 2) {
      combine2<T, kOp>(dst + b, srcs[0] + b, srcs[1] + b, m);
    } else {
      combine2<T, kOp>(acc, srcs[0] + b, srcs[1] + b, m);
      for (int j = 2; j < n - 1; ++j) combine2<T, kOp>(acc, acc, srcs[j] + b, m);
      combine2<T, kOp>(dst + b, acc, srcs[n - 1] + b, m);
    }
    if constexpr (Op == ReduceOp::avg) {
      const T denom = static_cast<T>(n);
      for (size_t i = 0; i < m; ++i) dst[b + i] = dst[b + i] / denom;
    }
  }
}

// Runtime dispatch over dtype and op.
inline void reduce_any(void* dst, const void* const* srcs, int n, size_t len, DType t,
                       ReduceOp op) {
  auto go = [&]<typename T>(T*) {
    T* d = static_cast<T*>(dst);
    const T* const* s = reinterpret_cast<const T* const*>(srcs);
    switch (op) {
      case ReduceOp::sum:
        reduce_n<T, ReduceOp::sum>(d, s, n, len);
        break;
      case ReduceOp::max:
        reduce_n<T, ReduceOp::max>(d, s, n, len);
        break;
      case ReduceOp::min:
        reduce_n<T, ReduceOp::min>(d, s, n, len);
        break;
      case ReduceOp::avg:
        if constexpr (std::is_floating_point_v<T>) reduce_n<T, ReduceOp::avg>(d, s, n, len);
        break;
    }
  };
  switch (t) {
    case DType::f32:
      go(static_cast<float*>(nullptr));
      break;
    case DType::i32:
      go(static_cast<int32_t*>(nullptr));
      break;
    case DType::i64:
      go(static_cast<int64_t*>(nullptr));
      break;
    case DType::u8:
      go(static_cast<uint8_t*>(nullptr));
      break;
  }
}

}  // namespace mt::local
