// Aligned, zero-initialised float storage. Parameters, gradients and optimizer moments
// each live in one Arena; the parameter table says which slice is which tensor.
//
// A dry arena is given sizes but no memory: size() and bytes() report them, data() stays
// null. The memory estimate builds a rank's model with dry arenas (model/dry_model.h) and
// reads what they would hold, so it counts what the constructors reserve.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace mt {

class Arena {
 public:
  enum class Mode : bool { allocate, dry };

  Arena() = default;
  explicit Arena(size_t count, Mode mode = Mode::allocate) : dry_(mode == Mode::dry) {
    resize(count);
  }
  ~Arena() { std::free(data_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        dry_(std::exchange(o.dry_, false)) {}
  Arena& operator=(Arena&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(dry_, o.dry_);
    return *this;
  }

  // Discards the old contents; the new storage is zeroed.
  // Throws RuntimeError with the size when the memory is not there (the caller's rank and
  // the run's memory estimate put it in context; a bare std::bad_alloc says nothing).
  void resize(size_t count) {
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    if (dry_) size_ = count;
    if (count == 0 || dry_) return;
    // 64-byte alignment: one cache line, and what AVX-512 loads prefer.
    size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
    data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!data_) throw_out_of_memory(bytes);
    std::memset(data_, 0, bytes);
    size_ = count;
  }
  void zero() {
    if (data_) std::memset(data_, 0, size_ * sizeof(float));
  }
  void release() { resize(0); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }

 private:
  [[noreturn]] static void throw_out_of_memory(size_t bytes) {
    char size[32];
    std::snprintf(size, sizeof size, bytes >= (size_t(1) << 30) ? "%.2f GiB" : "%.1f MiB",
                  double(bytes) / double(bytes >= (size_t(1) << 30) ? 1 << 30 : 1 << 20));
    throw RuntimeError(str("out of memory: cannot allocate ", size, " (an arena of ",
                           bytes / sizeof(float), " floats)"));
  }

  float* data_ = nullptr;
  size_t size_ = 0;
  bool dry_ = false;
};

}  // namespace mt
