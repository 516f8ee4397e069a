#include "parallel/tensor_parallel/row_parallel_linear.h"

#include <cstring>

#include "kernels/matmul.h"
#include "parallel/tensor_parallel/mappings.h"

namespace mt::tp {

namespace {

// y (N, C) += bias (C) on every row.
void add_bias_rows(float* y, const float* bias, int N, int C) {
#pragma omp parallel for
  for (int n = 0; n < N; ++n) {
    float* row = y + size_t(n) * C;
    for (int c = 0; c < C; ++c) row[c] += bias[c];
  }
}

}  // namespace

RowParallelLinear::RowParallelLinear(const TensorParallelShard& tp, int in, int out)
    : comm_(tp.comm), sp_(tp.splits_sequence()), tp_size_(tp.size), in_(in), out_(out) {}

void RowParallelLinear::bind(const float* w, const float* b, float* dw, float* db) {
  w_ = w, b_ = b, dw_ = dw, db_ = db;
}

void RowParallelLinear::forward(float* y, const float* x, int N, float* scratch) const {
  if (tp_size_ == 1) {
    matmul_forward(y, x, w_, b_, N, in_, out_);
    return;
  }
  const int Nl = sp_ ? N / tp_size_ : N;
  float* partial = sp_ ? scratch : y;
  matmul_forward(partial, x, w_, nullptr, N, in_, out_);
  if (sp_)
    ScatterToSequenceParallel::forward(comm_, partial, y, size_t(Nl) * out_);
  else
    ReduceFromTensorParallel::forward(comm_, y, size_t(N) * out_);
  if (b_) add_bias_rows(y, b_, Nl, out_);
}

const float* RowParallelLinear::full_output_grad(const float* dy, int N, float* scratch) const {
  if (!sp_) {
    ReduceFromTensorParallel::backward();
    return dy;
  }
  ScatterToSequenceParallel::backward(comm_, dy, scratch, size_t(N / tp_size_) * out_);
  return scratch;
}

void RowParallelLinear::backward_input(float* dx, const float* dy, int N, float* scratch) const {
  std::memset(dx, 0, size_t(N) * in_ * sizeof(float));
  matmul_backward_input(dx, full_output_grad(dy, N, scratch), w_, N, in_, out_);
}

void RowParallelLinear::backward_weight(const float* dy, const float* x, int N,
                                        float* scratch) const {
  matmul_backward_weight(dw_, db_, full_output_grad(dy, N, scratch), x, N, in_, out_);
}

}  // namespace mt::tp
