// What the session-level tests (test_train_step, test_recompute, test_residual_chain) read
// back from a rank's session, the random token shard they train on, and a run of a few steps
// on every rank.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/rng.h"
#include "data/token_shard.h"
#include "train/options.h"
#include "train/session.h"
#include "train/step.h"
#include "train/trace.h"

namespace mt::test_util {

using TensorsByName = std::map<std::string, std::vector<float>>;

// Every weight of the rank's table by name (each tensor of a dp replica is whole after the
// gather). Collective over dp (ZeRO 3).
inline TensorsByName params_by_name(Session& s) {
  std::vector<float> params(s.model.table().total());
  s.dp.gather_params(params.data());
  TensorsByName out;
  for (const ParamInfo& info : s.model.table().entries())
    out[info.name].assign(params.begin() + long(info.offset),
                          params.begin() + long(info.offset + info.numel));
  return out;
}

// Every tensor's dp-reduced gradient by name. Collective over dp (ZeRO >= 1).
inline TensorsByName grads_by_name(Session& s) {
  TensorsByName out;
  for (const ParamInfo& info : s.model.table().entries()) {
    std::vector<float> g(info.numel);
    s.dp.read_grad(info, g.data());
    out[info.name] = std::move(g);
  }
  return out;
}

// The session tests' model: 4 layers of dim 32 (head dim 16: the AVX-512 attention kernels
// where the build has them), vocabulary 37, batch 8 in 2 microbatches, constant lr.
inline TrainOptions tiny_session_options(const std::string& data, int steps) {
  TrainOptions o;
  o.model.layers = 4, o.model.dim = 32, o.model.heads = 2, o.model.seq = 16;
  o.model.vocab = 37, o.model.positions = o.model.seq;
  o.io.data = data;
  o.optim.batch = 8;
  o.optim.steps = steps;
  o.optim.lr_schedule = LrKind::constant;
  o.parallel.microbatches = 2;
  return o;
}

// n tokens drawn uniformly from [0, vocab) with the counter-based RNG (stream 1 of seed).
inline void write_random_shard(const std::string& path, size_t n, int vocab, uint64_t seed) {
  std::vector<int> tokens(n);
  for (size_t i = 0; i < n; ++i) tokens[i] = int(uniform01(seed, 1, i) * vocab);
  write_token_shard(path, tokens);
}

struct RankRun {
  std::vector<double> losses, norms;
  TensorsByName params;
};

// `steps` steps of o on every rank (threads); each rank's per-step figures and final weights
// by name.
inline std::vector<RankRun> run_ranks(const TrainOptions& o, int steps) {
  std::vector<RankRun> out(size_t(o.parallel.world()));
  run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) {
    std::unique_ptr<Session> s = build_session(o, w, RunInfo{});
    Trace trace(false, w.rank(), 0);
    RankRun& run = out[size_t(w.rank())];
    for (int step = 1; step <= steps; ++step) {
      const StepRecord r = train_step(*s, step, trace);
      run.losses.push_back(r.loss);
      run.norms.push_back(r.grad_norm);
    }
    run.params = params_by_name(*s);
  });
  return out;
}

}  // namespace mt::test_util
