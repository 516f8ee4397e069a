#include "model/expert_mlp.h"

#include "model/expert_mlp_bf16.h"
#include "model/expert_mlp_fp32.h"

namespace mt {

GeluExperts::GeluExperts(const ExpertShape& shape, ParamTable& table)
    : C_(shape.dim), H_(shape.hidden), El_(shape.count), fc_(El_), proj_(El_) {
  const int64_t C = C_, H = H_;
  for (int le = 0; le < El_; ++le) {
    const std::string q = shape.prefix + "experts." + std::to_string(shape.first + le) + ".";
    fc_[le].weight_info = &table.add(q + "c_fc.weight", {H, C}, InitKind::normal, 0.02f);
    fc_[le].bias_info = &table.add(q + "c_fc.bias", {H}, InitKind::zeros);
    proj_[le].weight_info =
        &table.add(q + "c_proj.weight", {C, H}, InitKind::normal, shape.proj_std);
    proj_[le].bias_info = &table.add(q + "c_proj.bias", {C}, InitKind::zeros);
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

std::unique_ptr<ExpertMlp> make_gelu_experts(const ExpertShape& shape, const uint64_t* bf16_version,
                                             ParamTable& table, SlotLayout& layout) {
  if (bf16_version) return std::make_unique<Bf16GeluExperts>(shape, bf16_version, table, layout);
  return std::make_unique<Fp32GeluExperts>(shape, table, layout);
}

}  // namespace mt
