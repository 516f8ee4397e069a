// Rotary position embedding, Hugging Face rotate-half layout (docs/contracts.md section 9):
// for each head vector x of hd dims at position p, with half = hd/2 and i < half,
//   x'[i]        = x[i] cos(p f_i) - x[i + half] sin(p f_i)
//   x'[i + half] = x[i + half] cos(p f_i) + x[i] sin(p f_i),   f_i = theta^(-2i/hd)
// (optionally rescaled by Llama 3.1's rope_scaling). Each pair (i, i + half) is rotated by
// an angle, so the backward is the rotation by minus that angle: no saved state.
// The angles are computed in double and cos/sin stored in fp32, once per run, in a table
// indexed by position. The attention kernels rotate a head's q and k rows as they read them
// (rope_rotate / rope_unrotate on one vector), so RoPE costs no pass of its own over memory;
// rope_forward / rope_backward over whole buffers serve the references and the tests.
#pragma once

#include <cstddef>
#include <vector>

namespace mt {

// Llama 3.1's "rope_scaling": {"rope_type": "llama3", ...} (factor 0 = none).
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1, high_freq_factor = 4;
  int original_max_position = 8192;
  bool enabled() const { return factor > 0; }
};

// The frequencies f_i (i < hd/2) after scaling, in double.
std::vector<double> rope_inv_freq(int head_dim, double theta, const RopeScaling& scaling = {});

class RopeTable {
 public:
  RopeTable() = default;
  // cos/sin of p * f_i for positions p in [0, positions).
  RopeTable(int head_dim, int positions, double theta, const RopeScaling& scaling = {});
  int half() const { return half_; }
  int positions() const { return positions_; }
  const float* cos(int pos) const { return cos_.data() + size_t(pos) * half_; }
  const float* sin(int pos) const { return sin_.data() + size_t(pos) * half_; }

 private:
  int half_ = 0, positions_ = 0;
  std::vector<float> cos_, sin_;  // (positions, half)
};

// One head vector x (2 * half) rotated in place to position p (cos/sin = the table's row).
inline void rope_rotate(float* x, const float* cos, const float* sin, int half) {
#pragma omp simd
  for (int i = 0; i < half; i++) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

// The adjoint of rope_rotate (the rotation by minus the angle), in place on a gradient.
inline void rope_unrotate(float* dx, const float* cos, const float* sin, int half) {
#pragma omp simd
  for (int i = 0; i < half; i++) {
    const float a = dx[i], b = dx[i + half];
    dx[i] = a * cos[i] + b * sin[i];
    dx[i + half] = b * cos[i] - a * sin[i];
  }
}

// x: rows of `heads` head vectors of table.half()*2 dims, the row r starting at
// x + r * row_stride; row r is at position positions[r % T] (positions: T entries; null means
// r % T). Rotated in place.
void rope_forward(float* x, int rows, size_t row_stride, int heads, int T, const int* positions,
                  const RopeTable& table);
// The same rows' gradient taken back through the rotation, in place.
void rope_backward(float* dx, int rows, size_t row_stride, int heads, int T, const int* positions,
                   const RopeTable& table);

}  // namespace mt
