// Shared setup of the planner tests: a small model, a synthetic local profile, and a real
// one-step run of the engine whose memory records the planner must reproduce.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/timer.h"
#include "data/token_shard.h"
#include "plan/hardware_profile.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan/software_profiles.h"
#include "test_util/temp_dir.h"
#include "train/trainer.h"

namespace mt::plan::testing {

// A 1B-class GPT (8 layers, d 2048, 16 heads, seq 2048, vocab 32768, batch 16) on `devices`
// H100s under --software megatron-core-2024: the model of the Megatron-Core pricing tests.
inline PlanRequest mcore_small_gpt(int devices) {
  PlanRequest r;
  r.model.layers = 8;
  r.model.dim = 2048;
  r.model.heads = 16;
  r.model.seq = 2048;
  r.model.vocab = 32768;
  r.batch = 16;
  r.hardware = preset_profile("h100-80gb");
  apply_software(r.hardware, "megatron-core-2024");
  r.devices = devices;
  return r;
}

// A profile with round figures (no calibration needed): the memory model does not use the
// rates, the time model's structure does not depend on them.
inline HardwareProfile synthetic_local() {
  HardwareProfile h;
  h.name = "test-local";
  h.local = true;
  apply_software(h, kLocalSoftware);  // the engine's own constants (software_profiles.h)
  h.devices_per_node = 1 << 20;
  h.cores = 64;
  h.memory_bytes = 64.0 * (1 << 30);
  h.peak_fp32 = 50e9;
  h.gemm_efficiency = 1;
  h.gemm_half_dim = 32;
  h.memory_bw = 10e9;
  h.kernel_overhead_s = 2e-6;
  h.intra_busbw = h.inter_busbw = 5e9;
  h.intra_latency_s = h.inter_latency_s = 5e-6;
  h.p2p_bw_intra = h.p2p_bw_inter = 5e9;
  h.peak_bf16 = 100e9;  // --precision bf16
  h.gemm_half_dim_bf16 = 48;
  h.bf16_overhead_s = 4e-6;
  h.bf16_convert_s = 0.1e-9;
  h.attention_bf16_fwd_flops = h.attention_bf16_bwd_flops = 20e9;
  return h;
}

inline PlanRequest small_request(int devices) {
  PlanRequest r;
  r.model.layers = 4;
  r.model.dim = 64;
  r.model.heads = 4;
  r.model.seq = 32;
  r.model.vocab = 256;
  r.batch = 8;
  r.hardware = synthetic_local();
  r.devices = devices;
  return r;
}

struct Record {
  int64_t params = 0, grads = 0, optimizer = 0, activations = 0;
  int64_t gather_buffers = 0, grad_buffers = 0;
  int64_t bf16_weights = 0;  // --precision bf16: the linears' bf16 copies (not in sum())
  int64_t sum() const { return params + grads + optimizer + activations; }
};

// Trains one step of the layout in this process; the largest memory record over ranks.
inline Record run_and_record(const TrainOptions& base, const test_util::TempDir& dir) {
  TrainOptions o = base;
  o.optim.steps = 1;
  o.io.quiet = true;
  o.io.data = dir / "train.bin";
  o.io.metrics = dir / "metrics.jsonl";
  std::vector<int> tokens(size_t(o.optim.batch) * (o.model.seq + 1) * 2);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(i * 7919 % o.model.vocab);
  write_token_shard(o.io.data, tokens);
  RunInfo info;
  info.peak = MfuPeak::given(1);
  info.t0 = now_seconds();
  run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) { train_rank(o, w, info); });
  std::ifstream in(o.io.metrics);
  Record best;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") != "memory") continue;
    Record r{j["params_bytes"],
             j["grads_bytes"],
             j["optimizer_bytes"],
             j["activations_peak_bytes"],
             j.value("gather_buffer_bytes", int64_t(0)),
             j.value("grad_buffer_bytes", int64_t(0)),
             j.value("bf16_weight_bytes", int64_t(0))};
    if (r.sum() > best.sum()) best = r;
  }
  return best;
}

// Every kind of a plan's memory equal in a and b (the host-independence tests).
inline void expect_same_memory(const PlannedMemory& a, const PlannedMemory& b,
                               const std::string& what) {
  EXPECT_EQ(a.params, b.params) << what;
  EXPECT_EQ(a.grads, b.grads) << what;
  EXPECT_EQ(a.optimizer, b.optimizer) << what;
  EXPECT_EQ(a.activations, b.activations) << what;
  EXPECT_EQ(a.buffers, b.buffers) << what;
}

}  // namespace mt::plan::testing
