#include "parallel/tensor_parallel/column_parallel_linear.h"

#include <cstring>

#include "kernels/matmul.h"
#include "parallel/tensor_parallel/mappings.h"

namespace mt::tp {

ColumnParallelLinear::ColumnParallelLinear(const TensorParallelShard& tp, int in, int out)
    : comm_(tp.comm), sp_(tp.splits_sequence()), tp_size_(tp.size), in_(in), out_(out) {}

void ColumnParallelLinear::bind(const float* w, const float* b, float* dw, float* db) {
  w_ = w, b_ = b, dw_ = dw, db_ = db;
}

const float* ColumnParallelLinear::full_input(const float* x, int N, float* gathered) const {
  if (!sp_) {
    CopyToTensorParallel::forward();
    return x;
  }
  GatherFromSequenceParallel::forward(comm_, x, gathered, size_t(N / tp_size_) * in_);
  return gathered;
}

void ColumnParallelLinear::forward(float* y, const float* x, int N, float* gathered,
                                   bool with_bias) const {
  matmul_forward(y, full_input(x, N, gathered), w_, with_bias ? b_ : nullptr, N, in_, out_);
}

void ColumnParallelLinear::backward_input(float* dx, const float* dy, int N, float* scratch) const {
  float* full = sp_ ? scratch : dx;  // (N, in): the partial sum of this rank's columns
  std::memset(full, 0, size_t(N) * in_ * sizeof(float));
  matmul_backward_input(full, dy, w_, N, in_, out_);
  if (sp_)
    GatherFromSequenceParallel::backward(comm_, full, dx, size_t(N / tp_size_) * in_);
  else
    CopyToTensorParallel::backward(comm_, dx, size_t(N) * in_);
}

void ColumnParallelLinear::backward_weight(const float* dy, const float* x, int N,
                                           float* gathered) const {
  backward_weight_gathered(dy, full_input(x, N, gathered), N);
}

void ColumnParallelLinear::backward_weight_gathered(const float* dy, const float* x_full,
                                                    int N) const {
  matmul_backward_weight(dw_, db_, dy, x_full, N, in_, out_);
}

}  // namespace mt::tp
