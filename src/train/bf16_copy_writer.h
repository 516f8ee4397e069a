// --precision bf16: the optimizer writes the linears' bf16 weight copies (kernels/
// bf16_weight.h) as it updates the weights, instead of the next step's first use of each
// layer converting the fp32 weights again: the update already holds every new weight in a
// register, so rounding it costs one more store (2 bytes an element) where the separate
// conversion re-read the weights (4 bytes) and stored the copy.
//
// It applies where nothing changes the weights between the update and the next step (not
// on a step whose --dp-sync averaged the replicas: the caller says so). At ZeRO 0 this rank
// updates every element of a copied weight. At ZeRO 1 and 2 it updates its shard only: the
// update writes the copy's elements of the shard, and after the all-gather of the updated
// parameters (DataParallel::after_optimizer) written() converts the rest of each copy from
// the gathered weights, so that at dp 2 each rank converts half of every copy where the next
// forward converted all of it (issue #33, stop 46). ZeRO 3 holds no whole weights between
// steps: its copies convert at first use. Layers outside it (the experts' copies, a layer
// packed for AMX tiles) convert at first use as before. The copies are bit for bit what that
// conversion gives (the same rounding of the same fp32 values).
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
  // optimizer updates); zero is the ZeRO stage (nothing is handed over at 3).
  Bf16CopyWriter(GPT& model, const float* params, size_t n, int zero, AdamW& opt);

  // After an update that wrote the copies and, under ZeRO 1-2, after the all-gather of the
  // updated parameters, when nothing changed the weights since: converts the parts of the
  // copies this rank did not update, then they hold what the next step's first use would
  // convert.
  void written();
  // The copies the optimizer writes, in whole or in part (tests, logs).
  size_t copies() const { return taken_.size(); }

 private:
  // Elements of a taken copy that another rank updates: converted by written().
  struct Rest {
    const float* weights;
    bf16* copy;
    size_t n;
  };
  std::vector<Bf16Weight*> taken_;
  std::vector<Rest> rest_;
};

}  // namespace mt
