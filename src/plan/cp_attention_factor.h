// What a context-parallel rank's attention core costs over 1 / cp of the one-worker kernel
// (hardware_profile.h cp*_attention_factor*, measured by plan/cp_attention_probe.cpp at cp 2
// and 4). Other cp: linear in log2 cp through the two (cp 3 between them); beyond cp 4 the
// line goes on with the slope from cp 2 to 4 (never falling: a larger ring's blocks are
// smaller still). An extrapolation, not a measurement: --explain says so.
#pragma once

#include <algorithm>
#include <cmath>

#include "plan/hardware_profile.h"

namespace mt::plan {

// 1 at cp 1; 0 where the profile has no factor for the precision (older profiles: the
// caller keeps the whole sequence's FLOPs, the pricing before the factor).
inline double cp_attention_factor(const HardwareProfile& hw, bool bf16, int cp) {
  if (cp <= 1) return 1;
  const double f2 = bf16 ? hw.cp2_attention_factor_bf16 : hw.cp2_attention_factor;
  const double f4 = bf16 ? hw.cp4_attention_factor_bf16 : hw.cp4_attention_factor;
  if (f2 <= 0 || f4 <= 0) return 0;
  const double doublings = std::log2(double(cp)) - 1;  // 0 at cp 2, 1 at cp 4
  if (doublings <= 1) return f2 + (f4 - f2) * doublings;
  return f4 + std::max(0.0, f4 - f2) * (doublings - 1);
}

}  // namespace mt::plan
