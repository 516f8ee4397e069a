#include "report/axis_scale.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mt {

namespace {

constexpr long double kMaxDouble = std::numeric_limits<double>::max();
// Tick loops stop here whatever the data: a bound, not a hope that `v += step` moves.
constexpr long double kMaxTicks = 100;

bool is_drawable(long double v) {
  return std::fabs(v) <= kMaxDouble;
}

}  // namespace

AxisScale AxisScale::linear(long double lo, long double hi, bool pad) {
  // Flat, or a span lost in the rounding of its magnitude: widen by a tenth of the magnitude.
  const long double magnitude = std::max(std::fabs(lo), std::fabs(hi));
  if (hi - lo <= magnitude * 1e-12L) {
    const long double d = std::max(1e-9L, magnitude * 0.1L);
    lo -= d, hi += d;
  }
  if (pad) {
    const long double p = (hi - lo) * 0.05L;
    lo -= p, hi += p;
  }
  return AxisScale(lo, hi, false);
}

AxisScale AxisScale::logarithmic(double lo_in, double hi_in) {
  long double lo = lo_in, hi = hi_in;
  if (hi <= lo * 1.0001L) lo /= 2, hi *= 2;
  return AxisScale(lo, hi, true);
}

double AxisScale::fraction(long double v) const {
  if (log_) return double((std::log(v) - std::log(lo_)) / (std::log(hi_) - std::log(lo_)));
  return double((v - lo_) / (hi_ - lo_));
}

std::vector<double> AxisScale::ticks(int want) const {
  return log_ ? log_ticks() : linear_ticks(want);
}

std::vector<double> AxisScale::linear_ticks(int want) const {
  const long double span = hi_ - lo_;
  long double step = std::pow(10.0L, std::floor(std::log10(span / want)));
  const long double ratio = span / want / step;
  if (ratio >= 7.5L)
    step *= 10;
  else if (ratio >= 3.5L)
    step *= 5;
  else if (ratio >= 1.5L)
    step *= 2;
  const long double first = std::ceil(lo_ / step), last = std::floor(hi_ / step);
  std::vector<double> t;
  if (!(last >= first) || last - first > kMaxTicks) return t;
  for (long double k = 0; k <= last - first; k += 1) {
    const long double v = (first + k) * step;
    if (is_drawable(v)) t.push_back(std::fabs(v) < step * 1e-9L ? 0.0 : double(v));
  }
  return t;
}

std::vector<double> AxisScale::log_ticks() const {
  std::vector<double> t;
  const long double first = std::floor(std::log10(lo_)), last = std::ceil(std::log10(hi_));
  for (long double e = first; e <= last; e += 1)
    for (long double m : {1.0L, 2.0L, 5.0L}) {
      const long double v = m * std::pow(10.0L, e);
      if (v >= lo_ * (1 - 1e-9L) && v <= hi_ * (1 + 1e-9L) && is_drawable(v) && double(v) > 0)
        t.push_back(double(v));
    }
  if (t.size() <= 7) return t;
  // A wide range: powers of ten only, and every k-th of those when still too many.
  std::vector<double> powers;
  for (double v : t)
    if (std::abs(std::log10(v) - std::round(std::log10(v))) < 1e-9) powers.push_back(v);
  const size_t every = std::max<size_t>(1, (powers.size() + 7) / 8);
  std::vector<double> out;
  for (size_t i = 0; i < powers.size(); i += every) out.push_back(powers[i]);
  return out;
}

}  // namespace mt
