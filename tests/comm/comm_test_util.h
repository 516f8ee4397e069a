// Helpers for the communication tests: integer-valued inputs (so sums compare exactly),
// the sweep of world sizes and counts, and the reference reductions.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "comm/world.h"

namespace mt::test {

inline bool full_tests() {
  const char* v = std::getenv("MESHTRAIN_FULL_TESTS");
  return v && std::string(v) == "1";
}

#if defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // TSan runs ~10x slower: keep one large case by default
#else
constexpr bool kSanitized = false;
#endif

// The large, non-divisible count runs for a few world sizes unless MESHTRAIN_FULL_TESTS=1.
inline std::vector<size_t> sweep_counts(int world) {
  std::vector<size_t> c = {0, 1, 7, 1000};
  const bool big = kSanitized ? world == 3 : (world == 1 || world == 3 || world == 8);
  if (full_tests() || big) c.push_back((1u << 20) + 3);
  return c;
}

// Element i of rank r's input number `salt`: small integers, negative ones included.
template <typename T>
T input(int r, size_t i, int salt = 0) {
  const long v = (long(r) * 131 + long(i % 100003) * 7 + salt * 17) % 61;
  if constexpr (std::is_unsigned_v<T>) {
    return T(v);
  } else {
    return T(v - 30);
  }
}

template <typename T>
std::vector<T> inputs(int r, size_t count, int salt = 0) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = input<T>(r, i, salt);
  return v;
}

// Reduction of element i over ranks 0..n-1 in rank order, as the backends do.
template <typename T>
T reduce_ref(int n, size_t i, ReduceOp op, int salt = 0) {
  T acc = input<T>(0, i, salt);
  for (int r = 1; r < n; ++r) {
    const T x = input<T>(r, i, salt);
    if (op == ReduceOp::max)
      acc = acc < x ? x : acc;
    else if (op == ReduceOp::min)
      acc = x < acc ? x : acc;
    else
      acc = T(acc + x);
  }
  if (op == ReduceOp::avg) acc = acc / T(n);
  return acc;
}

inline std::vector<ReduceOp> ops_for(DType t) {
  if (t == DType::f32) return {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
  return {ReduceOp::sum, ReduceOp::max, ReduceOp::min};
}

inline WorldOptions test_options(double timeout_s = 60) {
  WorldOptions o;
  o.timeout_s = timeout_s;
  return o;
}

// Runs fn<T>() for each supported element type.
template <class F>
void for_each_dtype(F&& fn) {
  fn.template operator()<float>();
  fn.template operator()<int32_t>();
  fn.template operator()<int64_t>();
  fn.template operator()<uint8_t>();
}

}  // namespace mt::test
