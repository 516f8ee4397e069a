#include "model/norm.h"

#include "core/error.h"

namespace mt {

namespace {

// A tensor registered already (register_final_norm, lm_head.h) is shared, not added again.
const ParamInfo* add_once(ParamTable& table, const std::string& name, int C, InitKind init,
                          bool partial_grad) {
  if (const ParamInfo* p = table.find(name)) {
    MT_CHECK(p->numel == size_t(C) && p->tp_partial_grad == partial_grad, "norm tensor ", name,
             " registered with another shape");
    return p;
  }
  ParamInfo& p = table.add(name, {C}, init);
  p.tp_partial_grad = partial_grad;
  return &p;
}

}  // namespace

Norm::Norm(NormKind kind, const std::string& prefix, int C, float eps, bool partial_grad,
           ParamTable& table)
    : kind_(kind), C_(C), eps_(eps) {
  w_info_ = add_once(table, prefix + ".weight", C, InitKind::ones, partial_grad);
  if (kind == NormKind::layernorm)
    b_info_ = add_once(table, prefix + ".bias", C, InitKind::zeros, partial_grad);
}

void Norm::reserve(SlotLayout& layout, size_t rows) {
  if (kind_ == NormKind::layernorm) mean_ = layout.reserve(rows);
  rstd_ = layout.reserve(rows);
}

void Norm::bind(float* params, float* grads) {
  w_ = params + w_info_->offset;
  dw_ = grads + w_info_->offset;
  if (b_info_) {
    b_ = params + b_info_->offset;
    db_ = grads + b_info_->offset;
  }
}

void Norm::forward(float* s, float* out, const float* x, int N) const {
  if (kind_ == NormKind::layernorm)
    layernorm_forward(out, s + mean_, s + rstd_, x, w_, b_, N, C_);
  else
    rmsnorm_forward(out, s + rstd_, x, w_, N, C_, eps_);
}

void Norm::forward(float* s, bf16* out, const float* x, int N) const {
  if (kind_ == NormKind::layernorm)
    layernorm_forward_bf16(out, s + mean_, s + rstd_, x, w_, b_, N, C_);
  else
    rmsnorm_forward_bf16(out, s + rstd_, x, w_, N, C_, eps_);
}

void Norm::add_forward(float* s, float* out, float* x, const float* res, int N) const {
  if (kind_ == NormKind::layernorm)
    add_layernorm_forward(out, s + mean_, s + rstd_, x, res, w_, b_, N, C_);
  else
    add_rmsnorm_forward(out, s + rstd_, x, res, w_, N, C_, eps_);
}

void Norm::add_forward(float* s, bf16* out, float* x, const float* res, int N) const {
  if (kind_ == NormKind::layernorm)
    add_layernorm_forward_bf16(out, s + mean_, s + rstd_, x, res, w_, b_, N, C_);
  else
    add_rmsnorm_forward_bf16(out, s + rstd_, x, res, w_, N, C_, eps_);
}

void Norm::backward_input(float* s, float* dx, const float* dout, const float* x, int N) const {
  if (kind_ == NormKind::layernorm)
    layernorm_backward_input(dx, dout, x, w_, s + mean_, s + rstd_, N, C_);
  else
    rmsnorm_backward_input(dx, dout, x, w_, s + rstd_, N, C_);
}

void Norm::backward_input_overwrite(float* s, float* dx, const float* dout, const float* x,
                                    int N) const {
  if (kind_ == NormKind::layernorm)
    layernorm_backward_input_overwrite(dx, dout, x, w_, s + mean_, s + rstd_, N, C_);
  else
    rmsnorm_backward_input_overwrite(dx, dout, x, w_, s + rstd_, N, C_);
}

void Norm::backward_input_residual(float* s, float* dx, const float* dres, const float* dout,
                                   const float* x, int N) const {
  if (kind_ == NormKind::layernorm)
    layernorm_backward_input_residual(dx, dres, dout, x, w_, s + mean_, s + rstd_, N, C_);
  else
    rmsnorm_backward_input_residual(dx, dres, dout, x, w_, s + rstd_, N, C_);
}

void Norm::backward_weight(float* s, const float* dout, const float* x, int N) const {
  if (kind_ == NormKind::layernorm)
    layernorm_backward_weight(dw_, db_, dout, x, s + mean_, s + rstd_, N, C_);
  else
    rmsnorm_backward_weight(dw_, dout, x, s + rstd_, N, C_);
}

}  // namespace mt
