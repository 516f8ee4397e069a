// Row-parallel linear (Megatron): W (out, in) split by input columns over tp, so each rank
// multiplies its `in` slice of the input (the column-parallel layer's output) and holds a
// partial sum of y. The output leaves through ReduceFromTensorParallel (all-reduce forward,
// identity on the gradient), or under sequence parallelism through
// ScatterToSequenceParallel (reduce-scatter of the token rows forward, all-gather of the
// output gradient). mappings.h has the pairs. The bias is replicated: it is added after
// the reduction so it counts once, and every rank computes the same bias gradient.
//
// N is the microbatch's b*T token rows; Nl = N, or N/t under sequence parallelism, is what
// this rank holds outside the parallel region. Backward is split in B (backward_input) and
// W (backward_weight) so zero-bubble schedules can defer W.
#pragma once

#include <memory>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/dense_gemm_bf16.h"
#include "tensor_parallel/tensor_parallel_shard.h"

namespace mt::tp {

class RowParallelLinear {
 public:
  RowParallelLinear() = default;
  // in: this rank's input columns; out: the whole output width.
  RowParallelLinear(const TensorParallelShard& tp, int in, int out);
  // w (out, in), b (out) or null, and their gradients (same shapes).
  void bind(const float* w, const float* b, float* dw, float* db);

  // --precision bf16 (docs/precision.md): the GEMMs read a bf16 copy of w, or its packs on
  // AMX, refreshed when *version moves (kernels/dense_gemm_bf16.h). Enables the *_bf16 calls.
  void enable_bf16(const uint64_t* version);
  int in() const { return in_; }  // this rank's input width
  int out() const { return out_; }
  size_t bf16_weight_bytes() const { return w16_ ? w16_->bytes() : 0; }
  // The scratch its weight gradient of N rows leaves on the calling thread (the transposed
  // fp32 orientation's copy, or the primitive's transposed bf16 dout: kernels/
  // matmul_weight_grad.h, kernels/matmul_bf16.h), for the memory estimate. any_cpu: the
  // most any CPU's bf16 path keeps (a local plan's count for its profile's CPU).
  size_t weight_grad_scratch_bytes(int N, bool any_cpu = false) const;
  // --precision bf16: this layer's plain weight copy and its bound weights, when its GEMMs
  // read one (kernels/bf16_weight.h, Bf16CopyTarget).
  void bf16_copies(std::vector<Bf16CopyTarget>& out) const {
    if (Bf16Weight* c = w16_ ? w16_->plain_copy() : nullptr) out.push_back({w_, c});
  }
  // The bf16 twins: the input x16 (N, in) is bf16 (kept so by the caller); y and the output
  // gradient dy stay fp32 (the residual stream). dy is rounded to bf16 into dy16 (N, out)
  // for the GEMMs; under sequence parallelism this rank's rows are rounded first and the
  // gather moves bf16 (scratch holds the local rows).
  void forward_bf16(float* y, const bf16* x16, int N, float* scratch) const;
  void backward_input_bf16(float* dx, const float* dy, int N, float* scratch, bf16* dy16) const;
  // The same with GELU's gradient applied as the product is stored (the GPT MLP's
  // projection): dx16 = bf16(gelu'(pre) * dx), pre (N, in) the fc's kept pre-activation;
  // stage (N, in) fp32 holds the product where the GEMM cannot fuse it
  // (dense_bf16_backward_input_dgelu).
  void backward_input_dgelu_bf16(bf16* dx16, const float* pre, const float* dy, int N,
                                 float* scratch, bf16* dy16, float* stage) const;
  void backward_weight_bf16(const float* dy, const bf16* x16, int N, float* scratch,
                            bf16* dy16) const;
  // The same two with dy already rounded: dy16 (N, out) is what full_output_grad_bf16 would
  // give, so without sequence parallelism only (MT_CHECK).
  void backward_input_bf16_rounded(float* dx, const bf16* dy16, int N) const;
  void backward_weight_bf16_rounded(const bf16* dy16, const bf16* x16, int N) const;

  // y (Nl, out) = this rank's rows of (sum over tp of x (N, in) @ w^T) + b.
  // scratch: (N, out), the partial sums under sequence parallelism.
  void forward(float* y, const float* x, int N, float* scratch) const;
  // dx (N, in) = dy_full (N, out) @ w (overwrites), where dy_full is dy (Nl, out) gathered
  // into scratch (N, out) under sequence parallelism, and dy itself otherwise.
  void backward_input(float* dx, const float* dy, int N, float* scratch) const;
  // dw += dy_full^T @ x; db += sum of dy_full's rows; dy gathered again into scratch.
  void backward_weight(const float* dy, const float* x, int N, float* scratch) const;

 private:
  const float* full_output_grad(const float* dy, int N, float* scratch) const;
  const bf16* full_output_grad_bf16(const float* dy, int N, float* scratch, bf16* dy16) const;
  // y (Nl, out) from this rank's partial sums (N, out) (in y, or scratch under SP) + bias.
  void finish_output(float* y, float* partial, int N) const;

  Communicator* comm_ = nullptr;
  bool sp_ = false;
  int tp_size_ = 1, in_ = 0, out_ = 0;
  const float *w_ = nullptr, *b_ = nullptr;
  float *dw_ = nullptr, *db_ = nullptr;
  std::shared_ptr<DenseBf16Weight> w16_;  // --precision bf16 only
};

}  // namespace mt::tp
