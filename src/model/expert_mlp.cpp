#include "model/expert_mlp.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

#include "kernels/gelu.h"
#include "kernels/grouped_gemm.h"
#include "kernels/swiglu.h"

#include "model/expert_mlp_bf16.h"
#include "model/expert_mlp_fp32.h"

namespace mt {

namespace {

ParamInfo& add_expert_param(ParamTable& table, const ExpertShape& shape, const std::string& name,
                            std::vector<int64_t> dims, InitKind init, float std,
                            Placement place = Placement::aligned) {
  ParamInfo& p = table.add(name, std::move(dims), init, std, {}, place);
  p.tp_partial_grad = shape.partial_grads;
  return p;
}

std::string expert_prefix(const ExpertShape& shape, int le) {
  return shape.prefix + "experts." + std::to_string(shape.first + le) + ".";
}

}  // namespace

// §1 and §9 names; init per §9a (c_proj and down_proj as every projection back to the
// residual stream: N(0, 0.02/sqrt(2L))).
ExpertWeights::ExpertWeights(const ExpertShape& shape, ParamTable& table)
    : kind_(shape.kind),
      C_(shape.dim),
      H_(shape.hidden),
      El_(shape.count),
      max_rows_(shape.max_rows),
      up_(El_),
      down_(El_) {
  const int64_t C = C_, H = H_;
  const bool gelu = kind_ == ExpertKind::gelu;
  for (int le = 0; le < El_; ++le) {
    const std::string q = expert_prefix(shape, le);
    auto add = [&](const char* name, std::vector<int64_t> dims, InitKind init, float std,
                   Placement place = Placement::aligned) {
      return &add_expert_param(table, shape, q + name, std::move(dims), init, std, place);
    };
    if (gelu) {
      up_[le].weight_info = add("c_fc.weight", {H, C}, InitKind::normal, 0.02f);
      up_[le].bias_info = add("c_fc.bias", {H}, InitKind::zeros, 0.02f);
      down_[le].weight_info = add("c_proj.weight", {C, H}, InitKind::normal, shape.proj_std);
      down_[le].bias_info = add("c_proj.bias", {C}, InitKind::zeros, 0.02f);
    } else {
      up_[le].weight_info = add("gate_proj.weight", {H, C}, InitKind::normal, 0.02f);
      add("up_proj.weight", {H, C}, InitKind::normal, 0.02f, Placement::after_previous);
      down_[le].weight_info = add("down_proj.weight", {C, H}, InitKind::normal, shape.proj_std);
    }
    up_[le].in = C_, up_[le].out = up_width();
    down_[le].in = H_, down_[le].out = C_;
  }
}

void ExpertWeights::bind(float* params, float* grads) {
  for (int le = 0; le < El_; ++le) {
    up_[le].bind(params, grads);
    down_[le].bind(params, grads);
  }
}

void ExpertWeights::activate(float* act, float* pre, const ExpertGroups& g) const {
  const size_t r0 = size_t(g.first());
  if (kind_ == ExpertKind::swiglu)
    return swiglu_forward(act + r0 * H_, pre + r0 * up_width(), g.size(), H_);
  for (int le = 0; le < El_; ++le) {
    const size_t o = size_t(g.begin(le)) * H_;
    if (g.rows(le) > 0) bias_gelu_forward(act + o, pre + o, up_[le].b, g.rows(le), H_);
  }
}

void ExpertWeights::activate(bf16* act, float* pre, const ExpertGroups& g) const {
  const size_t r0 = size_t(g.first());
  if (kind_ == ExpertKind::swiglu)
    return swiglu_forward_bf16(act + r0 * H_, pre + r0 * up_width(), g.size(), H_);
  for (int le = 0; le < El_; ++le) {
    const size_t o = size_t(g.begin(le)) * H_;
    if (g.rows(le) > 0) bias_gelu_forward_bf16(act + o, pre + o, up_[le].b, g.rows(le), H_);
  }
}

void ExpertWeights::activation_backward(float* d_pre, const float* pre, const float* d_act,
                                        int rows) const {
  if (kind_ == ExpertKind::swiglu)
    return swiglu_backward(d_pre, pre, d_act, rows, H_, /*accumulate=*/false);
  // gelu_backward accumulates into d_pre unless it is d_act: start from zero otherwise.
  if (d_pre != d_act) std::memset(d_pre, 0, size_t(rows) * H_ * sizeof(float));
  gelu_backward(d_pre, pre, d_act, size_t(rows) * H_);
}

void ExpertWeights::activation_backward(bf16* d_pre, const float* pre, const float* d_act,
                                        int rows) const {
  if (kind_ == ExpertKind::swiglu) return swiglu_backward_bf16(d_pre, pre, d_act, rows, H_);
  gelu_backward_bf16(d_pre, pre, d_act, size_t(rows) * H_);
}

void ExpertMlp::forward_into_tokens(float*, const ExpertGroups&, float*, float*, const int32_t*,
                                    const float*, int) {
  MT_CHECK(false, "these experts do not sum into token rows");
}

void ExpertMlp::backward_input_into_tokens(float*, const ExpertGroups&, float*, const int32_t*,
                                           int) {
  MT_CHECK(false, "these experts do not sum into token rows");
}

std::unique_ptr<ExpertMlp> make_experts(const ExpertShape& shape, const uint64_t* bf16_version,
                                        ParamTable& table, SlotLayout& layout) {
  if (bf16_version) return std::make_unique<Bf16Experts>(shape, bf16_version, table, layout);
  return std::make_unique<Fp32Experts>(shape, table, layout);
}

size_t ExpertWeights::gather_scratch_bytes(int parts, size_t element_bytes) const {
  // up's dW reads d_pre (U) and x (C); down's reads dy (C) and act (H).
  return std::max(
      grouped_backward_weight_segments_scratch_bytes(parts, max_rows_, C_, up_width(),
                                                     element_bytes),
      grouped_backward_weight_segments_scratch_bytes(parts, max_rows_, H_, C_, element_bytes));
}

}  // namespace mt
