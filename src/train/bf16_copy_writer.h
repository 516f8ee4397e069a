// --precision bf16: the optimizer writes the linears' bf16 weight copies (kernels/
// bf16_weight.h) as it updates the weights, instead of the next step's first use of each
// layer converting the fp32 weights again: the update already holds every new weight in a
// register, so rounding it costs one more store (2 bytes an element) where the separate
// conversion re-read the weights (4 bytes) and stored the copy.
//
// It applies where this rank updates every element of a copied weight and nothing changes
// the weights between the update and the next step: ZeRO 0 (a shard's update would leave the
// rest of a copy stale until the all-gather), not on a step whose --dp-sync averaged the
// replicas (the caller says so). Layers outside it (the experts' copies, a layer packed for
// AMX tiles) convert at first use as before. The copies are bit for bit what that conversion
// gives (the same rounding of the same fp32 values).
#pragma once

#include <vector>

#include "kernels/bf16_weight.h"
#include "model/gpt.h"
#include "train/optimizer.h"

namespace mt {

class Bf16CopyWriter {
 public:
  Bf16CopyWriter() = default;
  // Hands opt the copies of model whose weights lie in params (n floats, the buffer the
  // optimizer updates); zero is the ZeRO stage (nothing is handed over unless 0).
  Bf16CopyWriter(GPT& model, const float* params, size_t n, int zero, AdamW& opt);

  // After an update that wrote the copies, when nothing changed the weights since: they
  // hold what the next step's first use would convert.
  void written();
  // The copies the optimizer writes (tests, logs).
  size_t copies() const { return taken_.size(); }

 private:
  std::vector<Bf16Weight*> taken_;
};

}  // namespace mt
