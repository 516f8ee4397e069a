// A one-layer model whose global checkpoint the checkpoint tests write, damage and read back.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "train/checkpoint/global_checkpoint.h"

namespace mt::test_util {

struct TinyModel {
  ModelConfig cfg;
  std::unique_ptr<GPT> model;
  std::vector<float> m, v;
  explicit TinyModel(int layers = 1) : TinyModel(gpt2_of(layers)) {}
  explicit TinyModel(const ModelConfig& c) : cfg(c) {
    model = std::make_unique<GPT>(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
    model->init(1);
    m.assign(model->table().total(), 0.f);
    v.assign(model->table().total(), 0.f);
  }
  void save(const std::string& dir, int step,
            const std::map<std::string, std::string>& metadata = {}) {
    const ParamTable& t = model->table();
    save_checkpoint(dir, t, cfg, assemble_global(t, model->params().data(), nullptr),
                    assemble_global(t, m.data(), nullptr), assemble_global(t, v.data(), nullptr),
                    {step, 0, 1}, {}, metadata);
  }
  static ModelConfig gpt2_of(int layers) {
    ModelConfig c;
    c.layers = layers, c.dim = 8, c.heads = 2, c.seq = 4, c.vocab = 16;
    return c;
  }
  // Loads `dir` into fresh buffers of this model's layout; throws as --load would.
  TrainState load(const std::string& dir) {
    const size_t n = model->table().total();
    std::vector<float> p(n), a(n), b(n);
    return load_checkpoint(dir, model->table(), {p.data(), a.data(), b.data()});
  }
};

}  // namespace mt::test_util
