#include "train/finite_gate.h"

#include <cmath>

#include "core/error.h"
#include "kernels/bf16.h"

namespace mt {

namespace {

bool finite_on_disk(float x, DiskDtype dtype) {
  if (!std::isfinite(x)) return false;
  return dtype == DiskDtype::f32 || (float_to_bf16(x) & 0x7F80u) != 0x7F80u;
}

}  // namespace

void require_finite_for_disk(const std::string& path, std::span<const GateTensor> tensors,
                             DiskDtype dtype) {
  for (const GateTensor& t : tensors) {
    for (size_t i = 0; i < t.n; ++i) {
      const float x = t.data[i];
      if (finite_on_disk(x, dtype)) continue;
      const std::string what = std::isfinite(x)
                                   ? str(x, ", which rounds to ", x > 0 ? "" : "-", "inf in bf16")
                                   : str(x, " (not finite)");
      throw RuntimeError(str("not writing ", path, ": tensor ", t.name, " element ", i, " is ",
                             what, "; nothing was written"));
    }
  }
}

}  // namespace mt
