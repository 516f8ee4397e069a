// AdamW (docs/contracts.md §2) over the pieces of the parameter arena this rank updates. One
// worker, or plain data parallelism, updates every element; under ZeRO each data-parallel
// rank updates only its shard and keeps moments only for it. Moments are stored densely,
// piece after piece, so their size is exactly the number of updated elements.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "kernels/adamw.h"
#include "kernels/bf16.h"
#include "model/param_table.h"

namespace mt {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// A run of n elements of one tensor: where its parameters and gradients are in the
// buffers passed to update(), and where it sits in the table (global-view) layout.
struct OptimPiece {
  size_t table_off, param_off, grad_off, n;
  bool decay;  // weight decay applies (tensors with 2 or more dims)
};

// n bf16 values that the update writes, rounded from the updated parameters
// [param_off, param_off + n) of the buffer passed to update() (kernels/adamw.h).
struct Bf16CopyRange {
  size_t param_off;
  bf16* copy;
  size_t n;
};

class AdamW {
 public:
  AdamW(const AdamWConfig& cfg, std::vector<OptimPiece> pieces);

  // One update with learning rate lr; `step` is the 1-based update count. Returns true
  // when every element this rank updated, and both its moments, came out finite: the
  // caller stops the run otherwise, because a non-finite update (an lr of 1e38, an
  // overflowing moment) must never reach a save or an export. The check is fused into the
  // update kernel's stores (kernels/adamw.h) rather than a second pass over the state.
  // grad_scale is the clipping coefficient, applied to each gradient as it is read.
  // Every piece is updated in one pass (adamw_update_pieces).
  [[nodiscard]] bool update(float* params, const float* grads, double lr, int step,
                            float grad_scale = 1.0f);

  // From the next update on, also writes these bf16 copies of updated parameters. Returns
  // which ranges it took: those whose every element this rank updates (a range the pieces
  // cover only in part, e.g. a ZeRO shard's, would be left partly stale, so it is not
  // taken), or with `partial`, those it updates at least one element of: the caller then
  // owns the rest of each (uncovered()) and must write it before the copy is read. A
  // range overlapping one taken before is never taken. Replaces any earlier set.
  std::vector<bool> write_bf16_copies(const std::vector<Bf16CopyRange>& ranges,
                                      bool partial = false);
  // The parts of [param_off, param_off + n) that no piece updates, in order, as
  // [begin, end) offsets of the buffer passed to update().
  std::vector<std::pair<size_t, size_t>> uncovered(size_t param_off, size_t n) const;

  Arena& exp_avg() { return m_; }
  Arena& exp_avg_sq() { return v_; }
  const std::vector<OptimPiece>& pieces() const { return pieces_; }
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }

 private:
  // A part of one piece, with the copy its parameters are also written to (or null).
  struct Run {
    size_t piece, offset, n;
    bf16* copy;
  };
  void split_runs(const std::vector<Bf16CopyRange>& taken);

  AdamWConfig cfg_;
  std::vector<OptimPiece> pieces_;
  std::vector<size_t> moment_off_;
  std::vector<Run> runs_;                // the pieces in order, split where a copy starts or ends
  std::vector<AdamWPiece> kernel_runs_;  // runs_ as the kernel takes them, refilled per update
  Arena m_, v_;
};

}  // namespace mt
