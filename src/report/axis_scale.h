// The scale of a chart axis: the range it shows for data lo..hi, where a value sits on it,
// and round tick values. Any finite doubles are data, 1e308 and -1e308 together included:
// the range and positions are computed in long double (x87 extended: 15 exponent bits), so
// hi - lo, the padding and the division never overflow to Inf or NaN, and every tick loop
// is bounded by a count, not by adding a step that may be lost to rounding.
#pragma once

#include <vector>

namespace mt {

class AxisScale {
 public:
  // A linear axis for finite lo <= hi (sums of doubles may exceed a double: long double),
  // padded by 5% (pad), widened when flat.
  static AxisScale linear(long double lo, long double hi, bool pad);
  // A logarithmic axis for finite 0 < lo <= hi, widened when flat.
  static AxisScale logarithmic(double lo, double hi);

  // Where `v` sits: 0 at the low end, 1 at the high end (outside for values outside).
  double fraction(long double v) const;
  // Round values inside the range (1, 2, 5 x 10^k), about `want` of them on a linear axis,
  // at most 8 on a log axis; each a finite double.
  std::vector<double> ticks(int want) const;

 private:
  AxisScale(long double lo, long double hi, bool log) : lo_(lo), hi_(hi), log_(log) {}
  std::vector<double> linear_ticks(int want) const;
  std::vector<double> log_ticks() const;

  long double lo_, hi_;
  bool log_;
};

}  // namespace mt
