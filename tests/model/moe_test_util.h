// Shared by the MoE tests (tests/model, tests/parallel, the reference driver): a MoeLayer
// with its own parameter table, arenas and slots, and deterministic weights and inputs that
// depend only on (seed, global tensor name, global index), so every ep layout holds the
// same global model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/phase_profile.h"
#include "kernels/phase_totals_of.h"
#include "model/moe_layer.h"

namespace mt::moe_test {

inline ModelConfig config(int C, int E, int k, float capacity, float alpha = 0.1f,
                          float gamma = 0) {
  ModelConfig cfg;
  cfg.layers = 2, cfg.dim = C, cfg.heads = 1, cfg.seq = 8;
  cfg.experts = E, cfg.topk = k, cfg.capacity_factor = capacity;
  cfg.aux_loss_coef = alpha, cfg.router_bias_update = gamma;
  return cfg;
}

// Larger than the init so routing is decisive (no near-ties) and biases carry signal.
inline float fill_std(const std::string& name) {
  if (name.find("router") != std::string::npos) return 0.5f;
  if (name.find("bias") != std::string::npos) return 0.1f;
  return 0.3f;
}

inline void fill_params(const ParamTable& table, float* params, uint64_t seed) {
  for (const ParamInfo& p : table.entries()) {
    const float sd = fill_std(p.name);
    p.for_each_element([&](size_t l, int64_t g) {
      params[p.offset + l] = float(sd * normal01(seed, hash_name(p.name), uint64_t(g)));
    });
  }
}

inline std::vector<float> random_vec(size_t n, uint64_t seed, uint64_t stream, float sd = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(sd * normal01(seed, stream, i));
  return v;
}

struct Harness {
  int saved_threads;
  ParamTable table;
  SlotLayout layout;
  std::unique_ptr<MoeLayer> layer;
  Arena params, grads;
  std::vector<std::unique_ptr<Arena>> slots;
  Arena stage;  // --precision bf16 (ep.bf16_version set): the layer's fp32 stage

  // layer_index: the block index (tensor names transformer.h.{layer_index}.mlp.*).
  Harness(const ModelConfig& cfg, const ExpertParallelShard& ep, int max_tokens, int nslots = 1,
          uint64_t seed = 7, int layer_index = 0)
      : saved_threads(compute_threads()) {
    // One thread: the test shapes are tiny, and OpenMP barriers on a loaded 2-core machine
    // cost more than the work.
    set_compute_threads(1);
    layer = std::make_unique<MoeLayer>(layer_index, cfg, ep, max_tokens, table, layout);
    params.resize(table.total());
    grads.resize(table.total());
    fill_params(table, params.data(), seed);
    layer->bind(params.data(), grads.data());
    if (ep.bf16_version) {
      stage.resize(layer->bf16_stage_floats());
      layer->set_bf16_stage(stage.data());
    }
    for (int i = 0; i < nslots; ++i) slots.push_back(std::make_unique<Arena>(layout.total()));
  }
  ~Harness() { set_compute_threads(saved_threads); }
  float* slot(int i = 0) { return slots[i]->data(); }
  float* grad(const std::string& name) { return grads.data() + table.at(name).offset; }
};

// The phase totals of one forward + backward pass of N tokens of width C through the
// harness's layer, taken on a second pass: the first converts the bf16 weight copies.
inline PhaseTotals phases_of_second_pass(Harness& m, int N, int C) {
  const size_t n = size_t(N) * size_t(C);
  const auto h = random_vec(n, 3, 1);
  const auto dy = random_vec(n, 3, 2);
  std::vector<float> y(n), dh(n);
  const auto pass = [&] {
    m.layer->forward(m.slot(), h.data(), y.data(), N);
    m.layer->backward_input(m.slot(), h.data(), dy.data(), dh.data(), N);
    m.layer->backward_weight(m.slot(), h.data(), N);
  };
  return phases_of_second_run(pass);
}

}  // namespace mt::moe_test
