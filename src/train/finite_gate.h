// The one finiteness gate every writer of weights passes, at the last moment before bytes
// reach disk: write_safetensors (--export in fp32 or bf16, a global checkpoint's two files,
// `export --from`, and any writer built on it, such as an --export-hf model.safetensors) and
// write_shard_file (every rank's shard of a sharded checkpoint) call it before they create a
// file, so no writer can skip it and a refusal leaves no file, not even a half one.
//
// Values are checked as they would be stored: under bf16 a finite fp32 value near 3.4e38
// rounds to Inf, and is refused like a NaN. Earlier checks (after each optimizer update, after
// the DiLoCo outer step) stop a diverged run with a better message; this one holds whatever
// path the weights took to the writer.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace mt {

enum class DiskDtype { f32, bf16 };

struct GateTensor {
  std::string_view name;
  const float* data = nullptr;
  size_t n = 0;
};

// Throws RuntimeError "not writing PATH: tensor T element I is V (...); nothing was
// written" for the first value that would not be finite on disk.
void require_finite_for_disk(const std::string& path, std::span<const GateTensor> tensors,
                             DiskDtype dtype);

}  // namespace mt
