#include "kernels/bf16.h"
#include "kernels/phase_profile.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "kernels/vec_math.h"

namespace mt {

namespace {

// Below this many elements a conversion stays on the calling thread: starting an OpenMP
// team costs more than converting (a 64K-element conversion is ~20 us on one core).
constexpr size_t kParallelMin = size_t(1) << 16;

// The same arithmetic as float_to_bf16, written branch-free on the integer bits so the
// compiler vectorises it (the NaN test is a compare and a blend).
inline std::uint16_t round_bits(std::uint32_t u) {
  const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? std::uint16_t(0x7FC0) : std::uint16_t(rounded);
}

}  // namespace

void to_bf16(bf16* out, const float* in, size_t n) {
  PhaseScope phase_scope(Phase::conversion, 0, 6.0 * double(n));
  const std::int64_t len = std::int64_t(n);
#if defined(__AVX512F__)
  // 16 at a time through round_bf16x16 (the conversion instruction where there is one).
  const std::int64_t vecs = len / 16;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t b = 0; b < vecs; ++b)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * b),
                        round_bf16x16(_mm512_loadu_ps(in + 16 * b)));
  for (std::int64_t i = 16 * vecs; i < len; ++i)
    out[i] = round_bits(std::bit_cast<std::uint32_t>(in[i]));
#else
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < len; ++i) out[i] = round_bits(std::bit_cast<std::uint32_t>(in[i]));
#endif
}

bf16* to_bf16_in_place(float* x, size_t n) {
  PhaseScope phase_scope(Phase::conversion, 0, 6.0 * double(n));
  // Vector loads and stores (may-alias types) and memcpy in the tail: the two views of the
  // buffer alias. Value i's bf16 lands at bytes [2i, 2i + 2), below every byte not yet read.
  bf16* out = reinterpret_cast<bf16*>(x);
  size_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), round_bf16x16(_mm512_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    const std::uint16_t h = round_bits(u);
    std::memcpy(out + i, &h, sizeof h);
  }
  return out;
}

void from_bf16(float* out, const bf16* in, size_t n) {
  PhaseScope phase_scope(Phase::conversion, 0, 6.0 * double(n));
  const std::int64_t len = std::int64_t(n);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < len; ++i) out[i] = std::bit_cast<float>(std::uint32_t(in[i]) << 16);
}

void round_to_bf16(float* x, size_t n) {
  PhaseScope phase_scope(Phase::conversion, 0, 8.0 * double(n));
  const std::int64_t len = std::int64_t(n);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
  for (std::int64_t i = 0; i < len; ++i)
    x[i] =
        std::bit_cast<float>(std::uint32_t(round_bits(std::bit_cast<std::uint32_t>(x[i]))) << 16);
}

}  // namespace mt
