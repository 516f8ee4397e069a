// Column-parallel linear (Megatron): W (out, in) split by output rows over tp, so each rank
// computes its `out` columns of y from the whole input. The input enters through
// CopyToTensorParallel (identity forward, all-reduce of the input gradient), or under
// sequence parallelism through GatherFromSequenceParallel (all-gather of the token rows
// forward, reduce-scatter of the input gradient). mappings.h has the pairs.
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

class ColumnParallelLinear {
 public:
  ColumnParallelLinear() = default;
  // in: the whole input width; out: this rank's output columns.
  ColumnParallelLinear(const TensorParallelShard& tp, int in, int out);
  // w (out, in), b (out) or null, and their gradients (same shapes).
  void bind(const float* w, const float* b, float* dw, float* db);

  int in() const { return in_; }  // this rank's input width
  int out() const { return out_; }
  const float* bias() const { return b_; }

  // --precision bf16 (docs/precision.md): the GEMMs read a bf16 copy of w, or its packs on
  // AMX, refreshed when *version moves (kernels/dense_gemm_bf16.h). Enables the *_bf16 calls.
  void enable_bf16(const uint64_t* version);
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

  // The bf16 twins of the calls above: the input x16 and the output gradient dy16 are bf16
  // (kept so by the caller), y and dx fp32. Under sequence parallelism x16 (Nl, in) is
  // gathered in bf16 into gathered16 (N, in).
  void forward_bf16(float* y, const bf16* x16, int N, bf16* gathered16,
                    bool with_bias = true) const;
  // forward_bf16 with the bias and GELU in the GEMM's stores (the GPT MLP's fc):
  // pre = x_full @ w^T + b, kept for the backward, and act = bf16(gelu(pre))
  // (dense_bf16_forward_gelu).
  void forward_gelu_bf16(float* pre, bf16* act, const bf16* x16, int N, bf16* gathered16) const;
  void backward_input_bf16(float* dx, const bf16* dy16, int N, float* scratch) const;
  void backward_weight_bf16(const bf16* dy16, const bf16* x16, int N, bf16* gathered16) const;
  void backward_weight_gathered_bf16(const bf16* dy16, const bf16* x16_full, int N) const;

  // y (N, out) = x_full (N, in) @ w^T + b (bias skipped when with_bias is false), where
  // x_full is x (Nl, in) gathered into `gathered` (N, in) under sequence parallelism, and x
  // itself otherwise (gathered unused, may be null).
  void forward(float* y, const float* x, int N, float* gathered, bool with_bias = true) const;
  // dx (Nl, in) = gradient w.r.t. this rank's x (overwrites), from dy (N, out): each rank's
  // product covers only its columns, so the partial sums are all-reduced (reduce-scattered
  // under sequence parallelism, through scratch (N, in)).
  void backward_input(float* dx, const float* dy, int N, float* scratch) const;
  // dw += dy^T @ x_full; db += sum of dy's rows. Gathers x (Nl, in) again into `gathered`
  // (N, in) under sequence parallelism, the way forward did.
  void backward_weight(const float* dy, const float* x, int N, float* gathered) const;
  // The same from x_full (N, in) the caller kept from forward (no communication).
  void backward_weight_gathered(const float* dy, const float* x_full, int N) const;

 private:
  const float* full_input(const float* x, int N, float* gathered) const;
  const bf16* full_input_bf16(const bf16* x16, int N, bf16* gathered16) const;
  // dx (Nl, in) from this rank's partial full (N, in) (the adjoint of the input region).
  void finish_input_grad(float* dx, float* full, int N) const;

  Communicator* comm_ = nullptr;
  bool sp_ = false;
  int tp_size_ = 1, in_ = 0, out_ = 0;
  const float *w_ = nullptr, *b_ = nullptr;
  float *dw_ = nullptr, *db_ = nullptr;
  std::shared_ptr<DenseBf16Weight> w16_;  // --precision bf16 only
};

}  // namespace mt::tp
