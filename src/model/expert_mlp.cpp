#include "model/expert_mlp.h"

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

GeluExperts::GeluExperts(const ExpertShape& shape, ParamTable& table)
    : C_(shape.dim), H_(shape.hidden), El_(shape.count), fc_(El_), proj_(El_) {
  const int64_t C = C_, H = H_;
  for (int le = 0; le < El_; ++le) {
    const std::string q = expert_prefix(shape, le);
    auto add = [&](const char* name, std::vector<int64_t> dims, InitKind init, float std = 0.02f) {
      return &add_expert_param(table, shape, q + name, std::move(dims), init, std);
    };
    fc_[le].weight_info = add("c_fc.weight", {H, C}, InitKind::normal, 0.02f);
    fc_[le].bias_info = add("c_fc.bias", {H}, InitKind::zeros);
    proj_[le].weight_info = add("c_proj.weight", {C, H}, InitKind::normal, shape.proj_std);
    proj_[le].bias_info = add("c_proj.bias", {C}, InitKind::zeros);
    fc_[le].in = C_, fc_[le].out = H_;
    proj_[le].in = H_, proj_[le].out = C_;
  }
}

void GeluExperts::bind(float* params, float* grads) {
  for (int le = 0; le < El_; ++le) {
    fc_[le].bind(params, grads);
    proj_[le].bind(params, grads);
  }
}

// §9 names; init per §9a (down_proj as every down_proj: N(0, 0.02/sqrt(2L))).
SwigluExperts::SwigluExperts(const ExpertShape& shape, ParamTable& table)
    : C_(shape.dim), H_(shape.hidden), El_(shape.count), gate_up_(El_), down_(El_) {
  const int64_t C = C_, H = H_;
  for (int le = 0; le < El_; ++le) {
    const std::string q = expert_prefix(shape, le);
    gate_up_[le].weight_info =
        &add_expert_param(table, shape, q + "gate_proj.weight", {H, C}, InitKind::normal, 0.02f);
    add_expert_param(table, shape, q + "up_proj.weight", {H, C}, InitKind::normal, 0.02f,
                     Placement::after_previous);
    down_[le].weight_info = &add_expert_param(table, shape, q + "down_proj.weight", {C, H},
                                              InitKind::normal, shape.proj_std);
    gate_up_[le].in = C_, gate_up_[le].out = 2 * H_;
    down_[le].in = H_, down_[le].out = C_;
  }
}

void SwigluExperts::bind(float* params, float* grads) {
  for (int le = 0; le < El_; ++le) {
    gate_up_[le].bind(params, grads);
    down_[le].bind(params, grads);
  }
}

std::unique_ptr<ExpertMlp> make_experts(const ExpertShape& shape, const uint64_t* bf16_version,
                                        ParamTable& table, SlotLayout& layout) {
  if (shape.kind == ExpertKind::swiglu) {
    if (bf16_version)
      return std::make_unique<Bf16SwigluExperts>(shape, bf16_version, table, layout);
    return std::make_unique<Fp32SwigluExperts>(shape, table, layout);
  }
  if (bf16_version) return std::make_unique<Bf16GeluExperts>(shape, bf16_version, table, layout);
  return std::make_unique<Fp32GeluExperts>(shape, table, layout);
}

}  // namespace mt
