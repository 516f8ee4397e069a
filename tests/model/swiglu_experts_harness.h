// One layer's SwiGLU experts (model/expert_mlp.h) with their own parameter table, parameter
// and gradient arenas, slot and bf16 stage: the harness of the grouped-experts and the
// expert-pack tests. They differ in what they pass: fp32 or bf16, the weights' first version
// and the parameters' values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/expert_mlp.h"

namespace mt::test_util {

struct SwigluExperts {
  int C, H;
  uint64_t version;  // the weights' version the bf16 experts' copies follow
  ParamTable table;
  SlotLayout layout;
  std::unique_ptr<ExpertMlp> mlp;
  Arena params, grads, slot, stage;

  // count experts of (dim C, hidden H) over at most `rows` rows; bf16: the experts keep bf16
  // copies that follow `version` (first_version to start); the parameters are values(n), n
  // of them.
  SwigluExperts(int count, int c, int h, int rows, bool bf16, uint64_t first_version,
                const std::function<std::vector<float>(size_t)>& values)
      : C(c), H(h), version(first_version) {
    ExpertShape shape;
    shape.kind = ExpertKind::swiglu;
    shape.prefix = "model.layers.0.mlp.";
    shape.dim = C, shape.hidden = H, shape.count = count;
    shape.max_rows = rows, shape.max_tokens = rows;
    mlp = make_experts(shape, bf16 ? &version : nullptr, table, layout);
    params.resize(table.total()), grads.resize(table.total());
    const std::vector<float> p = values(table.total());
    std::copy(p.begin(), p.end(), params.data());
    mlp->bind(params.data(), grads.data());
    slot.resize(layout.total());
    stage.resize(std::max<size_t>(mlp->stage_floats(), 1));
    mlp->set_stage(stage.data());
  }
  SwigluExperts(const SwigluExperts&) = delete;
  SwigluExperts& operator=(const SwigluExperts&) = delete;

  // Expert le's [gate; up] (2H, C) or down (C, H), or their gradients.
  float* at(const std::string& what, int le, bool grad) {
    const std::string name = "model.layers.0.mlp.experts." + std::to_string(le) + "." + what;
    return (grad ? grads.data() : params.data()) + table.at(name).offset;
  }
};

}  // namespace mt::test_util
