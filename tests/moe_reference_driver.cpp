// Runs one MoE layer forward and backward on deterministic weights and inputs and writes
// everything (config, inputs, weights, outputs, gradients) to a file for
// tests/reference/moe_torch.py, which recomputes it with PyTorch.
//
//   moe_reference_driver OUT K CAPACITY_FACTOR GAMMA
//
// File: records of [u32 name length][name][u32 ndim][i64 dims][f32 data], little-endian.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "model/moe_test_util.h"

namespace {

void write(std::FILE* f, const std::string& name, std::vector<int64_t> dims, const float* data) {
  const uint32_t len = uint32_t(name.size()), nd = uint32_t(dims.size());
  size_t n = 1;
  for (int64_t d : dims) n *= size_t(d);
  std::fwrite(&len, 4, 1, f);
  std::fwrite(name.data(), 1, len, f);
  std::fwrite(&nd, 4, 1, f);
  std::fwrite(dims.data(), 8, nd, f);
  std::fwrite(data, 4, n, f);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mt;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s OUT K CAPACITY_FACTOR GAMMA\n", argv[0]);
    return 2;
  }
  const int N = 48, C = 16, E = 4, k = std::atoi(argv[2]);
  const float capacity = std::strtof(argv[3], nullptr), gamma = std::strtof(argv[4], nullptr);
  const float alpha = 0.5f, aux_scale = 0.75f;
  const ModelConfig cfg = moe_test::config(C, E, k, capacity, alpha, gamma);
  moe_test::Harness m(cfg, {}, N);
  if (gamma > 0) m.layer->router_bias() = {0.06f, -0.04f, 0.03f, 0.0f};
  m.layer->set_aux_grad_scale(aux_scale);
  std::vector<float> h = moe_test::random_vec(size_t(N) * C, 21, 1);
  std::vector<float> dy = moe_test::random_vec(size_t(N) * C, 21, 2);
  std::vector<float> y(h.size()), dh(h.size());
  m.layer->forward(m.slot(), h.data(), y.data(), N);
  m.layer->backward_input(m.slot(), h.data(), dy.data(), dh.data(), N);
  m.layer->backward_weight(m.slot(), h.data(), N);

  std::FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 1;
  const MoeStats& st = m.layer->stats();
  const float config[8] = {float(N), float(C), float(E),  float(k),
                           capacity, alpha,    aux_scale, gamma};
  write(f, "config", {8}, config);
  write(f, "h", {N, C}, h.data());
  write(f, "dy", {N, C}, dy.data());
  write(f, "bias", {E}, m.layer->router_bias().data());
  for (const ParamInfo& p : m.table.entries())
    write(f, "param:" + p.name, p.global_shape, m.params.data() + p.offset);
  write(f, "y", {N, C}, y.data());
  const float aux = float(st.aux_sum), dropped = float(st.dropped);
  write(f, "aux", {1}, &aux);
  write(f, "dropped", {1}, &dropped);
  std::vector<float> load(st.load.begin(), st.load.end());
  write(f, "load", {E}, load.data());
  write(f, "dh", {N, C}, dh.data());
  for (const ParamInfo& p : m.table.entries())
    write(f, "grad:" + p.name, p.global_shape, m.grads.data() + p.offset);
  return std::fclose(f) == 0 ? 0 : 1;
}
