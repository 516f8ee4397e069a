// The bf16 copy of one linear layer's fp32 weight (--precision bf16, docs/precision.md).
//
// The fp32 weight is the master copy (the optimizer updates it, checkpoints hold it); the
// GEMMs read this copy. It is converted when the model's weight version has moved since
// the last conversion, so once per change of the weights (once per step, or after a load)
// rather than once per microbatch or per use. The version is bumped by whoever is about to
// run the model after its weights may have changed (GPT::weights_changed). Under ZeRO-3
// the fp32 weight is a gathered buffer that moves between uses: the copy is made from
// whatever the layer is bound to at its first use after a change, and kept.
//
// The copy's memory is taken at that first conversion, not at construction: a model built
// only to be measured (the memory estimate's dry run, model/dry_model.h) holds none, and
// bytes() reports the copy's size either way.
//
// A writer may fill the copy ahead of its use instead: the optimizer, which rounds each
// updated weight into it as it stores the fp32 value (kernels/adamw.h,
// train/bf16_copy_writer.h), so no pass of its own re-reads the fp32 weights. It then calls
// written_ahead(): the copy holds the weights the next version will name (the next step's
// GPT::weights_changed), and that first use converts nothing. Any other bump in between
// (an evaluation's) only costs a conversion, never a stale copy.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "kernels/bf16.h"

namespace mt {

class Bf16Weight {
 public:
  Bf16Weight(size_t n, const uint64_t* version) : n_(n), version_(version) {}

  // The bf16 copy of w (n floats), converted first if the weights changed since.
  const bf16* get(const float* w) {
    MT_CHECK(w != nullptr, "bf16 weight copy of an unbound layer");
    if (converted_ != *version_) {
      data_.resize(n_);
      to_bf16(data_.data(), w, n_);
      converted_ = *version_;
    }
    return data_.data();
  }
  size_t bytes() const { return n_ * sizeof(bf16); }
  size_t size() const { return n_; }

  // The copy's n values, for a writer ahead of use (above); then written_ahead().
  bf16* storage() {
    data_.resize(n_);
    return data_.data();
  }
  void written_ahead() { converted_ = *version_ + 1; }

 private:
  size_t n_;
  std::vector<bf16> data_;  // n_ values from the first conversion on
  const uint64_t* version_;
  uint64_t converted_ = ~uint64_t(0);  // no version yet
};

// A layer's copy and the fp32 weights it is made from (where the layer is bound), for a
// writer ahead of use.
struct Bf16CopyTarget {
  const float* weights;
  Bf16Weight* copy;
};

}  // namespace mt
