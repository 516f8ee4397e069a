#include "kernels/rope.h"
#include "kernels/phase_profile.h"

#include <cmath>

#include "core/error.h"

namespace mt {

std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling& s) {
  MT_CHECK(head_dim > 0 && head_dim % 2 == 0, "RoPE needs an even head dim, got ", head_dim);
  const int half = head_dim / 2;
  std::vector<double> f(half);
  for (int i = 0; i < half; i++) f[i] = std::pow(theta, -2.0 * i / head_dim);
  if (!s.enabled()) return f;
  // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, and the band
  // between the two wavelength bounds interpolated smoothly (HF's llama3 rope init).
  const double low_wavelen = s.original_max_position / s.low_freq_factor;
  const double high_wavelen = s.original_max_position / s.high_freq_factor;
  for (double& inv : f) {
    const double wavelen = 2 * M_PI / inv;
    if (wavelen > low_wavelen) {
      inv /= s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      inv = (1 - smooth) * inv / s.factor + smooth * inv;
    }
  }
  return f;
}

RopeTable::RopeTable(int head_dim, int positions, double theta, const RopeScaling& scaling)
    : half_(head_dim / 2), positions_(positions) {
  const std::vector<double> f = rope_inv_freq(head_dim, theta, scaling);
  cos_.resize(size_t(positions) * half_);
  sin_.resize(cos_.size());
  for (int p = 0; p < positions; p++)
    for (int i = 0; i < half_; i++) {
      const double angle = double(p) * f[i];
      cos_[size_t(p) * half_ + i] = float(std::cos(angle));
      sin_[size_t(p) * half_ + i] = float(std::sin(angle));
    }
}

namespace {

template <bool kForward>
void rope_rows(float* x, int rows, size_t row_stride, int heads, int T, const int* positions,
               const RopeTable& t) {
  const int half = t.half();
  // Checked before the parallel loop: an exception must not leave an OpenMP region.
  for (int i = 0; i < T && i < rows; i++) {
    const int p = positions ? positions[i] : i;
    MT_CHECK(p >= 0 && p < t.positions(), "RoPE position ", p, " outside the table of ",
             t.positions());
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; r++) {
    const int p = positions ? positions[r % T] : r % T;
    for (int h = 0; h < heads; h++) {
      float* v = x + size_t(r) * row_stride + size_t(h) * 2 * half;
      if (kForward)
        rope_rotate(v, t.cos(p), t.sin(p), half);
      else
        rope_unrotate(v, t.cos(p), t.sin(p), half);
    }
  }
}

}  // namespace

void rope_forward(float* x, int rows, size_t row_stride, int heads, int T, const int* positions,
                  const RopeTable& table) {
  PhaseScope phase_scope(Phase::activation, 0, 8.0 * rows * double(row_stride));
  rope_rows<true>(x, rows, row_stride, heads, T, positions, table);
}

void rope_backward(float* dx, int rows, size_t row_stride, int heads, int T, const int* positions,
                   const RopeTable& table) {
  PhaseScope phase_scope(Phase::activation, 0, 8.0 * rows * double(row_stride));
  rope_rows<false>(dx, rows, row_stride, heads, T, positions, table);
}

}  // namespace mt
