// The phase totals (kernels/phase_profile.h) of the second of two runs of a pass: the first
// packs or converts the bf16 weight copies, which the counted pass must not include.
#pragma once

#include "kernels/phase_profile.h"

namespace mt {

template <class F>
PhaseTotals phases_of_second_run(F&& pass) {
  pass();
  PhaseTotals totals;
  attach_phase_totals(&totals);
  pass();
  attach_phase_totals(nullptr);
  return totals;
}

}  // namespace mt
