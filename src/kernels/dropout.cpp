#include "kernels/dropout.h"

#include <climits>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/philox.h"

namespace mt {

namespace {

PhiloxKey key_of(const DropoutKey& k) {
  const uint64_t mixed = mix64(k.seed ^ mix64(k.step + 0x64726f706f7574ull));  // "dropout"
  return {uint32_t(mixed), uint32_t(mixed >> 32)};
}

// Draws below it are dropped: p of the 2^32 words (to within 2^-32).
uint32_t drop_threshold(float p) {
  return uint32_t(std::min(4294967295.0, std::floor(double(p) * 4294967296.0)));
}

// y[c] = x[c] * keep * scale for the C features of one token; a Philox call gives 4 words.
void apply_row(float* y, const float* x, int C, int64_t token, int64_t feature_offset,
               const PhiloxKey& key, uint32_t site, uint32_t threshold, float scale) {
  int64_t block = -1;
  PhiloxCounter words{};
  for (int c = 0; c < C; ++c) {
    const int64_t f = feature_offset + c;
    if (f / 4 != block) {
      block = f / 4;
      words = philox4x32_10(
          {uint32_t(block), uint32_t(uint64_t(token)), uint32_t(uint64_t(token) >> 32), site}, key);
    }
    y[c] = words[size_t(f % 4)] >= threshold ? x[c] * scale : 0.0f;
  }
}

void apply(float* y, const float* x, int rows, int C, const int64_t* row_tokens,
           int64_t feature_offset, const DropoutKey& key, float p) {
  MT_CHECK(p >= 0 && p < 1, "dropout probability ", p);
  if (p == 0) {
    if (y != x) std::memcpy(y, x, sizeof(float) * size_t(rows) * size_t(C));
    return;
  }
  const PhiloxKey k = key_of(key);
  const uint32_t threshold = drop_threshold(p);
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r)
    apply_row(y + size_t(r) * C, x + size_t(r) * C, C, row_tokens[r], feature_offset, k, key.site,
              threshold, scale);
}

}  // namespace

DropoutMask::DropoutMask(const DropoutKey& key, float p)
    : key_(key_of(key)),
      site_(key.site),
      threshold_(drop_threshold(p)),
      scale_(1.0f / (1.0f - p)) {}

bool DropoutMask::keeps(int64_t token, int64_t feature) const {
  const PhiloxCounter w = philox4x32_10(
      {uint32_t(feature / 4), uint32_t(uint64_t(token)), uint32_t(uint64_t(token) >> 32), site_},
      key_);
  return w[size_t(feature % 4)] >= threshold_;
}

void DropoutMask::scale_row(float* x, int n, int64_t token, int64_t feature_base,
                            const int* offsets) const {
  int64_t block = -1;
  PhiloxCounter words{};
  for (int j = 0; j < n; ++j) {
    if (offsets[j] < 0 || offsets[j] == INT_MAX) continue;
    const int64_t f = feature_base + offsets[j];
    if (f / 4 != block) {
      block = f / 4;
      words = philox4x32_10(
          {uint32_t(block), uint32_t(uint64_t(token)), uint32_t(uint64_t(token) >> 32), site_},
          key_);
    }
    x[j] = words[size_t(f % 4)] >= threshold_ ? x[j] * scale_ : 0.0f;
  }
}

bool dropout_keeps(const DropoutKey& key, float p, int64_t token, int64_t feature) {
  if (p == 0) return true;
  return DropoutMask(key, p).keeps(token, feature);
}

void dropout_forward(float* y, const float* x, int rows, int C, const int64_t* row_tokens,
                     int64_t feature_offset, const DropoutKey& key, float p) {
  apply(y, x, rows, C, row_tokens, feature_offset, key, p);
}

void dropout_backward(float* dx, const float* dy, int rows, int C, const int64_t* row_tokens,
                      int64_t feature_offset, const DropoutKey& key, float p) {
  apply(dx, dy, rows, C, row_tokens, feature_offset, key, p);
}

}  // namespace mt
