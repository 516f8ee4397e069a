// Element-wise reduction of n peer buffers into one or more destinations, for the
// shared-memory collectives. Sources are combined in member order (0, 1, ..., n-1) so the
// result does not depend on which rank reduces which chunk.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "comm/communicator.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

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

// Copies with non-temporal stores where the destination is 32-byte aligned. For buffers far
// larger than the caches this skips the read-for-ownership of every destination line (a
// third of a copy's memory traffic). The caller must _mm_sfence() before publishing.
inline void stream_copy(void* dst, const void* src, size_t bytes) {
#if defined(__AVX__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = std::min(bytes, (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32);
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 32 <= bytes; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

inline void stream_fence() {
#if defined(__AVX__)
  _mm_sfence();
#endif
}

// For each of the ndst destinations: dst[0..len) = op over j of srcs[j][0..len) (avg
// divides the sum by n). A destination may alias a source: each tile is read from every
// source into an L1-resident accumulator before any destination is written.
template <typename T, ReduceOp Op>
void reduce_tiles(T* const* dsts, int ndst, const T* const* srcs, int n, size_t len, bool stream) {
  constexpr ReduceOp kOp = Op == ReduceOp::avg ? ReduceOp::sum : Op;
  constexpr size_t kTile = 8192 / sizeof(T);
  alignas(64) T acc[kTile];
  for (size_t b = 0; b < len; b += kTile) {
    const size_t m = std::min(kTile, len - b);
    if (n == 1) {
      std::memcpy(acc, srcs[0] + b, m * sizeof(T));
    } else {
      combine2<T, kOp>(acc, srcs[0] + b, srcs[1] + b, m);
      for (int j = 2; j < n; ++j) combine2<T, kOp>(acc, acc, srcs[j] + b, m);
    }
    if constexpr (Op == ReduceOp::avg) {
      const T denom = static_cast<T>(n);
      for (size_t i = 0; i < m; ++i) acc[i] = acc[i] / denom;
    }
    for (int k = 0; k < ndst; ++k) {
      if (stream) {
        stream_copy(dsts[k] + b, acc, m * sizeof(T));
      } else if (dsts[k] + b != srcs[0] + b || n != 1) {
        std::memcpy(dsts[k] + b, acc, m * sizeof(T));
      }
    }
  }
  if (stream) stream_fence();
}

// Runtime dispatch over dtype and op (avg on integer types is rejected at issue).
inline void reduce_any(void* const* dsts, int ndst, const void* const* srcs, int n, size_t len,
                       DType t, ReduceOp op, bool stream) {
  auto go = [&]<typename T>(T*) {
    T* const* d = reinterpret_cast<T* const*>(dsts);
    const T* const* s = reinterpret_cast<const T* const*>(srcs);
    switch (op) {
      case ReduceOp::sum:
        reduce_tiles<T, ReduceOp::sum>(d, ndst, s, n, len, stream);
        break;
      case ReduceOp::max:
        reduce_tiles<T, ReduceOp::max>(d, ndst, s, n, len, stream);
        break;
      case ReduceOp::min:
        reduce_tiles<T, ReduceOp::min>(d, ndst, s, n, len, stream);
        break;
      case ReduceOp::avg:
        if constexpr (std::is_floating_point_v<T>)
          reduce_tiles<T, ReduceOp::avg>(d, ndst, s, n, len, stream);
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
