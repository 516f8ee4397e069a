#include "train/bf16_copy_writer.h"

namespace mt {

Bf16CopyWriter::Bf16CopyWriter(GPT& model, const float* params, size_t n, int zero, AdamW& opt) {
  if (zero != 0) return;
  const std::vector<Bf16CopyTarget> targets = model.bf16_copies();
  std::vector<Bf16CopyRange> ranges;
  std::vector<Bf16Weight*> copies;
  for (const Bf16CopyTarget& t : targets) {
    // Only weights bound inside the optimizer's buffer (always, at ZeRO 0; a check, not a rule).
    if (t.weights < params || t.weights + t.copy->size() > params + n) continue;
    ranges.push_back({size_t(t.weights - params), t.copy->storage(), t.copy->size()});
    copies.push_back(t.copy);
  }
  const std::vector<bool> taken = opt.write_bf16_copies(ranges);
  for (size_t i = 0; i < copies.size(); ++i)
    if (taken[i]) taken_.push_back(copies[i]);
}

void Bf16CopyWriter::written() {
  for (Bf16Weight* c : taken_) c->written_ahead();
}

}  // namespace mt
