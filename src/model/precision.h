// Numeric precision of the model's GEMMs (--precision, docs/precision.md).
//   fp32  every tensor and every product in fp32 (the default, bit-for-bit as before).
//   bf16  the linear layers (attention QKV and projection, MLP, the tied head) multiply
//         bf16 copies of their weights by bf16 inputs with fp32 accumulation, and keep
//         those inputs for backward in bf16; the residual stream, LayerNorm, attention,
//         softmax, the loss, gradients, their reductions, master weights and AdamW stay fp32.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class Precision { fp32, bf16 };

// The names --precision takes.
inline std::vector<std::pair<std::string, Precision>> precision_names() {
  return {{"fp32", Precision::fp32}, {"bf16", Precision::bf16}};
}

inline const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : "fp32";
}

// "fp32" | "bf16"; false for anything else.
inline bool parse_precision(const std::string& s, Precision* out) {
  if (s == "fp32") {
    *out = Precision::fp32;
  } else if (s == "bf16") {
    *out = Precision::bf16;
  } else {
    return false;
  }
  return true;
}

}  // namespace mt
