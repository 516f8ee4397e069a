// Per-microbatch activation storage.
//
// Each layer reserves the buffers its backward needs in a SlotLayout at construction; a
// slot is one arena of that layout. A microbatch acquires a slot at its forward and
// releases it after its weight-gradient pass, so storage is reused across microbatches
// and steps (no allocation in the step loop once the peak is reached). A pipeline schedule
// with k microbatches in flight holds k slots; the pool reports the peak.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/error.h"

namespace mt {

class SlotLayout {
 public:
  // Reserves `count` floats; returns their offset within a slot (64-byte aligned).
  size_t reserve(size_t count) {
    size_t off = total_;
    total_ += (count + 15) / 16 * 16;
    return off;
  }
  // Reserves `count` bf16 values (half as many floats); offset in floats, aligned the same.
  size_t reserve_bf16(size_t count) { return reserve((count + 1) / 2); }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

class ActivationPool {
 public:
  explicit ActivationPool(size_t slot_floats) : slot_floats_(slot_floats) {}

  int acquire() {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (!in_use_[i]) {
        in_use_[i] = true;
        ++live_;
        return int(i);
      }
    slots_.push_back(std::make_unique<Arena>(slot_floats_));
    in_use_.push_back(true);
    ++live_;
    if (live_ > peak_) peak_ = live_;
    return int(slots_.size() - 1);
  }
  void release(int id) {
    MT_CHECK(id >= 0 && size_t(id) < slots_.size() && in_use_[id], "bad slot ", id);
    in_use_[id] = false;
    --live_;
  }
  float* base(int id) { return slots_[id]->data(); }
  size_t slot_floats() const { return slot_floats_; }
  size_t slot_bytes() const { return slot_floats_ * sizeof(float); }
  int peak_slots() const { return peak_; }
  size_t peak_bytes() const { return size_t(peak_) * slot_bytes(); }

 private:
  size_t slot_floats_;
  std::vector<std::unique_ptr<Arena>> slots_;
  std::vector<bool> in_use_;
  int live_ = 0, peak_ = 0;
};

}  // namespace mt
