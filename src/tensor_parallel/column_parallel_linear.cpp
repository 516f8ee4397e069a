#include "tensor_parallel/column_parallel_linear.h"

#include "kernels/dense_gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/matmul_weight_grad.h"
#include "tensor_parallel/mappings.h"

namespace mt::tp {

ColumnParallelLinear::ColumnParallelLinear(const TensorParallelShard& tp, int in, int out)
    : comm_(tp.comm), sp_(tp.splits_sequence()), tp_size_(tp.size), in_(in), out_(out) {}

size_t ColumnParallelLinear::weight_grad_scratch_bytes(int N, bool any_cpu) const {
  if (!w16_) return fp32_weight_grad_scratch_bytes(in_, out_);
  return any_cpu ? matmul_bf16_weight_grad_scratch_bytes_any_cpu(N, in_, out_)
                 : matmul_bf16_weight_grad_scratch_bytes(N, in_, out_);
}

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
  // Written with beta 0 (no memset first): the same bits as onto zeros (kernels/matmul.h).
  matmul_backward_input(full, dy, w_, N, in_, out_, /*accumulate=*/false);
  finish_input_grad(dx, full, N);
}

void ColumnParallelLinear::finish_input_grad(float* dx, float* full, int N) const {
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

// ---- --precision bf16 ---------------------------------------------------------------------

void ColumnParallelLinear::enable_bf16(const uint64_t* version) {
  w16_ = std::make_shared<DenseBf16Weight>(in_, out_, version);
}

const bf16* ColumnParallelLinear::full_input_bf16(const bf16* x16, int N, bf16* gathered16) const {
  if (!sp_) return x16;
  // The all-gather of the GEMM input moves bf16 rows: half the bytes of the fp32 path.
  all_gather_rows(comm_, x16, gathered16, size_t(N / tp_size_) * in_);
  return gathered16;
}

void ColumnParallelLinear::forward_bf16(float* y, const bf16* x16, int N, bf16* gathered16,
                                        bool with_bias) const {
  dense_bf16_forward(y, full_input_bf16(x16, N, gathered16), *w16_, w_, with_bias ? b_ : nullptr,
                     N);
}

void ColumnParallelLinear::forward_gelu_bf16(float* pre, bf16* act, const bf16* x16, int N,
                                             bf16* gathered16) const {
  dense_bf16_forward_gelu(pre, act, full_input_bf16(x16, N, gathered16), *w16_, w_, b_, N);
}

void ColumnParallelLinear::backward_input_bf16(float* dx, const bf16* dy16, int N,
                                               float* scratch) const {
  float* full = sp_ ? scratch : dx;  // (N, in), fp32: the gradient reductions stay fp32
  dense_bf16_backward_input(full, dy16, *w16_, w_, N, /*accumulate=*/false);
  finish_input_grad(dx, full, N);
}

void ColumnParallelLinear::backward_weight_bf16(const bf16* dy16, const bf16* x16, int N,
                                                bf16* gathered16) const {
  backward_weight_gathered_bf16(dy16, full_input_bf16(x16, N, gathered16), N);
}

void ColumnParallelLinear::backward_weight_gathered_bf16(const bf16* dy16, const bf16* x16_full,
                                                         int N) const {
  dense_bf16_backward_weight(dw_, db_, dy16, x16_full, N, in_, out_);
}

}  // namespace mt::tp
