// Aligned, zero-initialised float storage. Parameters, gradients and optimizer moments
// each live in one Arena; the parameter table says which slice is which tensor.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace mt {

class Arena {
 public:
  Arena() = default;
  explicit Arena(size_t count) { resize(count); }
  ~Arena() { std::free(data_); }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  Arena(Arena&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Arena& operator=(Arena&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }

  // Discards the old contents; the new storage is zeroed.
  void resize(size_t count) {
    std::free(data_);
    data_ = nullptr;
    size_ = count;
    if (count == 0) return;
    // 64-byte alignment: one cache line, and what AVX-512 loads prefer.
    size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
    data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, bytes);
  }
  void zero() {
    if (size_) std::memset(data_, 0, size_ * sizeof(float));
  }
  void release() { resize(0); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace mt
