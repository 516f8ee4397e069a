// Small helpers shared by the in-process benchmarks (bench_kernels, bench_step).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

namespace mt::bench {

// "1,2,4" -> {1, 2, 4}
inline std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
  return out;
}

// n deterministic values uniform in [-scale/2, scale/2) (an LCG: benchmarks need
// repeatable inputs, not good randomness).
inline std::vector<float> filled(size_t n, float scale, uint32_t seed = 12345) {
  std::vector<float> v(n);
  for (float& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = scale * (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
  }
  return v;
}

}  // namespace mt::bench
