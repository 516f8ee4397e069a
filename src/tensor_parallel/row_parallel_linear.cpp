#include "tensor_parallel/row_parallel_linear.h"

#include "core/error.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/matmul_weight_grad.h"
#include "tensor_parallel/mappings.h"

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

size_t RowParallelLinear::weight_grad_scratch_bytes(int N, bool any_cpu) const {
  if (!w16_) return fp32_weight_grad_scratch_bytes(in_, out_);
  return any_cpu ? matmul_bf16_weight_grad_scratch_bytes_any_cpu(N, in_, out_)
                 : matmul_bf16_weight_grad_scratch_bytes(N, in_, out_);
}

void RowParallelLinear::bind(const float* w, const float* b, float* dw, float* db) {
  w_ = w, b_ = b, dw_ = dw, db_ = db;
}

void RowParallelLinear::forward(float* y, const float* x, int N, float* scratch) const {
  if (tp_size_ == 1) {
    matmul_forward(y, x, w_, b_, N, in_, out_);
    return;
  }
  float* partial = sp_ ? scratch : y;
  matmul_forward(partial, x, w_, nullptr, N, in_, out_);
  finish_output(y, partial, N);
}

void RowParallelLinear::finish_output(float* y, float* partial, int N) const {
  const int Nl = sp_ ? N / tp_size_ : N;
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
  // One product is all of dx: written with beta 0, the bits of a memset then +=, one write
  // pass of (N, in) fewer (kernels/matmul.h).
  matmul_backward_input(dx, full_output_grad(dy, N, scratch), w_, N, in_, out_,
                        /*accumulate=*/false);
}

void RowParallelLinear::backward_weight(const float* dy, const float* x, int N,
                                        float* scratch) const {
  matmul_backward_weight(dw_, db_, full_output_grad(dy, N, scratch), x, N, in_, out_);
}

// ---- --precision bf16 ---------------------------------------------------------------------

void RowParallelLinear::enable_bf16(const uint64_t* version) {
  w16_ = std::make_shared<DenseBf16Weight>(in_, out_, version);
}

void RowParallelLinear::forward_bf16(float* y, const bf16* x16, int N, float* scratch) const {
  if (tp_size_ == 1) {
    dense_bf16_forward(y, x16, *w16_, w_, b_, N);
    return;
  }
  float* partial = sp_ ? scratch : y;  // the partial sums and their reduction stay fp32
  dense_bf16_forward(partial, x16, *w16_, w_, nullptr, N);
  finish_output(y, partial, N);
}

const bf16* RowParallelLinear::full_output_grad_bf16(const float* dy, int N, float* scratch,
                                                     bf16* dy16) const {
  if (!sp_) {
    to_bf16(dy16, dy, size_t(N) * out_);
    return dy16;
  }
  // Round this rank's rows into scratch (room for 2N rows of bf16), gather them in bf16.
  const size_t local = size_t(N / tp_size_) * out_;
  bf16* local16 = reinterpret_cast<bf16*>(scratch);
  to_bf16(local16, dy, local);
  all_gather_rows(comm_, local16, dy16, local);
  return dy16;
}

void RowParallelLinear::backward_input_bf16(float* dx, const float* dy, int N, float* scratch,
                                            bf16* dy16) const {
  dense_bf16_backward_input(dx, full_output_grad_bf16(dy, N, scratch, dy16), *w16_, w_, N,
                            /*accumulate=*/false);
}

void RowParallelLinear::backward_input_dgelu_bf16(bf16* dx16, const float* pre, const float* dy,
                                                  int N, float* scratch, bf16* dy16,
                                                  float* stage) const {
  dense_bf16_backward_input_dgelu(dx16, pre, full_output_grad_bf16(dy, N, scratch, dy16), *w16_, w_,
                                  N, stage);
}

void RowParallelLinear::backward_weight_bf16(const float* dy, const bf16* x16, int N,
                                             float* scratch, bf16* dy16) const {
  dense_bf16_backward_weight(dw_, db_, full_output_grad_bf16(dy, N, scratch, dy16), x16, N, in_,
                             out_);
}

void RowParallelLinear::backward_input_bf16_rounded(float* dx, const bf16* dy16, int N) const {
  MT_CHECK(!sp_, "a rounded output gradient under sequence parallelism");
  dense_bf16_backward_input(dx, dy16, *w16_, w_, N, /*accumulate=*/false);
}

void RowParallelLinear::backward_weight_bf16_rounded(const bf16* dy16, const bf16* x16,
                                                     int N) const {
  MT_CHECK(!sp_, "a rounded output gradient under sequence parallelism");
  dense_bf16_backward_weight(dw_, db_, dy16, x16, N, in_, out_);
}

}  // namespace mt::tp
