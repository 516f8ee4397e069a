// The DeepSeek-style requests the planner's DeepSeek tests share (memory, MTP, MLA): the
// model, DeepSeek-V3's software on H800s at bf16, and the published run's stated layout.
#pragma once

#include "plan/hardware_profile.h"
#include "plan/layout.h"
#include "plan/software_profiles.h"

namespace mt::plan::testing {

// DeepSeek-V3 (report 4.2 and the released config; bench/planner/modern_runs.py): 61 layers
// of 7168, 128 heads, 256 routed experts of 2048 + 1 shared, top-8, the first 3 dense.
inline ModelConfig deepseek_v3_model() {
  ModelConfig m;
  m.arch = Arch::llama;
  m.layers = 61, m.dim = 7168, m.heads = 128, m.ffn_dim = 18432;
  m.experts = 256, m.topk = 8, m.expert_ffn_dim = 2048;
  m.shared_experts = 1, m.first_dense_layers = 3;
  m.router = RouterScore::sigmoid;
  m.vocab = 129280, m.tie_embeddings = false, m.seq = 4096;
  return m;
}

// A small model of the same kind: 8 layers of 1024, 16 experts of 512 + 1 shared, top-4.
inline ModelConfig deepseek_small_model() {
  ModelConfig m;
  m.arch = Arch::llama;
  m.layers = 8, m.dim = 1024, m.heads = 16, m.ffn_dim = 2816;
  m.experts = 16, m.topk = 4, m.expert_ffn_dim = 512;
  m.shared_experts = 1, m.first_dense_layers = 1;
  m.vocab = 32000, m.tie_embeddings = false, m.seq = 1024;
  return m;
}

// `m` under DeepSeek-V3's software on `devices` H800s, bf16, with `mtp_layers` MTP modules.
inline PlanRequest deepseek_request(const ModelConfig& m, int batch, int devices, int mtp_layers) {
  PlanRequest r;
  r.model = m;
  r.batch = batch;
  r.hardware = preset_profile("h800-80gb");
  apply_software(r.hardware, "deepseek-v3-2024");
  r.devices = devices;
  r.precision = Precision::bf16;
  r.mtp_layers = mtp_layers;
  return r;
}

// The published run on 2,048 H800s with its stated knobs fixed: pp 16 DualPipe, ep 64,
// dp 128, no tp.
inline PlanRequest deepseek_v3_run(int mtp_layers) {
  PlanRequest r = deepseek_request(deepseek_v3_model(), 15360, 2048, mtp_layers);
  r.tp = 1, r.pp = 16, r.ep = 64, r.dp = 128;
  r.schedule = "dualpipev";
  return r;
}

// The layout the run states (ZeRO-1, one sequence per microbatch, the V's two chunks).
inline Layout deepseek_v3_stated_layout() {
  Layout l;
  l.dp = 128, l.pp = 16, l.ep = 64, l.zero = 1, l.micro_batch = 1;
  l.schedule = "dualpipev", l.virtual_stages = 2;
  l.precision = Precision::bf16;
  return l;
}

}  // namespace mt::plan::testing
