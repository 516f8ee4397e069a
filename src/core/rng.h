// Counter-based random numbers: a value depends only on (seed, stream, index), never on
// the order of calls or on which rank asks. This is what makes initialisation identical
// across parallel layouts: rank r initialising elements [a, b) of a tensor gets exactly
// the numbers one worker would have put there.
#pragma once

#include <cstdint>
#include <string_view>

namespace mt {

// splitmix64 finaliser: a bijective 64-bit mix with good avalanche.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// FNV-1a of a name, used to derive one stream per tensor from its global name.
inline uint64_t hash_name(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Uniform in (0, 1), from 53 random bits.
inline double uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t x = mix64(mix64(seed ^ mix64(stream)) + index);
  return (static_cast<double>(x >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// Standard normal via Box-Muller on two independent uniforms of the same index.
double normal01(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace mt
