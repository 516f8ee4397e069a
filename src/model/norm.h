// A block's or the head's normalisation: LayerNorm (weight and bias, saving mean and rstd;
// the gpt2 block, §1) or RMSNorm (weight only, saving rstd; the llama block, §9), registered
// under `prefix` + ".weight" (+ ".bias"). It keeps its statistics in the microbatch's slot;
// the caller keeps the input and owns the output buffer.
//
// Under sequence parallelism the norm sees only this rank's rows of the sequence, so its
// weight gradients are partial sums over tp (ParamInfo::tp_partial_grad).
#pragma once

#include <string>

#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "model/activation_pool.h"
#include "model/param_table.h"

namespace mt {

enum class NormKind { layernorm, rmsnorm };

class Norm {
 public:
  Norm() = default;
  // Registers prefix.weight (and .bias for LayerNorm), or uses them if the table already
  // holds them (registered ahead by register_final_norm, lm_head.h).
  Norm(NormKind kind, const std::string& prefix, int C, float eps, bool partial_grad,
       ParamTable& table);
  // The statistics of up to `rows` rows in each slot.
  void reserve(SlotLayout& layout, size_t rows);
  void bind(float* params, float* grads);

  // out (N, C) = norm(x (N, C)), fp32, or rounded to bf16 as it is stored (bitwise to_bf16 of
  // the fp32 output).
  void forward(float* slot, float* out, const float* x, int N) const;
  void forward(float* slot, bf16* out, const float* x, int N) const;
  // x (N, C) += res, then out = norm(x): a residual add folded into the norm's row pass,
  // bitwise add_inplace followed by forward.
  void add_forward(float* slot, float* out, float* x, const float* res, int N) const;
  void add_forward(float* slot, bf16* out, float* x, const float* res, int N) const;
  // dx (N, C) += the input gradient, from dout and x (N, C).
  void backward_input(float* slot, float* dx, const float* dout, const float* x, int N) const;
  // dx (N, C) = the input gradient (overwrites): bitwise a memset then backward_input.
  void backward_input_overwrite(float* slot, float* dx, const float* dout, const float* x,
                                int N) const;
  // dx (N, C) = dres + the input gradient: a residual path's gradient and the norm's in one
  // pass (bitwise a copy of dres followed by backward_input).
  void backward_input_residual(float* slot, float* dx, const float* dres, const float* dout,
                               const float* x, int N) const;
  // dweight (and dbias) += from dout and x.
  void backward_weight(float* slot, const float* dout, const float* x, int N) const;

 private:
  NormKind kind_ = NormKind::layernorm;
  int C_ = 0;
  float eps_ = 0;
  const ParamInfo *w_info_ = nullptr, *b_info_ = nullptr;  // no bias for RMSNorm
  const float *w_ = nullptr, *b_ = nullptr;
  float *dw_ = nullptr, *db_ = nullptr;
  size_t mean_ = 0, rstd_ = 0;  // slot offsets (mean: LayerNorm only)
};

}  // namespace mt
