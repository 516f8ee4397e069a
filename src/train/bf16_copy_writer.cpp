#include "train/bf16_copy_writer.h"

namespace mt {

Bf16CopyWriter::Bf16CopyWriter(GPT& model, const float* params, size_t n, int zero, AdamW& opt) {
  if (zero == 3) return;
  const std::vector<Bf16CopyTarget> targets = model.bf16_copies();
  std::vector<Bf16CopyRange> ranges;
  std::vector<Bf16Weight*> copies;
  for (const Bf16CopyTarget& t : targets) {
    // Only weights bound inside the optimizer's buffer (always, at ZeRO 0-2; a check, not a
    // rule).
    if (t.weights < params || t.weights + t.copy->size() > params + n) continue;
    ranges.push_back({size_t(t.weights - params), t.copy->storage(), t.copy->size()});
    copies.push_back(t.copy);
  }
  // ZeRO 1-2: a shard covers part of a copy; written() converts the rest after the gather.
  const std::vector<bool> taken = opt.write_bf16_copies(ranges, zero > 0);
  for (size_t i = 0; i < copies.size(); ++i) {
    if (!taken[i]) continue;
    taken_.push_back(copies[i]);
    const Bf16CopyRange& r = ranges[i];
    for (const auto& [lo, hi] : opt.uncovered(r.param_off, r.n))
      rest_.push_back({params + lo, r.copy + (lo - r.param_off), hi - lo});
  }
}

void Bf16CopyWriter::written() {
  for (const Rest& r : rest_) to_bf16(r.copy, r.weights, r.n);
  for (Bf16Weight* c : taken_) c->written_ahead();
}

}  // namespace mt
