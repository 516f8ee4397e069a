// Pipeline bubble benchmark: pp = 2 ranks as threads (one compute thread each), a model
// whose two stages cost the same, and for each schedule and microbatch count the measured
// bubble (idle / step time, PipelineExecutor) against the theory: (p-1)/(m+p-1) for 1f1b
// and gpipe, the simulator's value for zb-h1. Then the simulator's bubble for larger pp
// using the measured per-op costs F, B, W.
//
//   bench_pp [--quick] [--steps N] [--dim C] [--seq T] [--layers L] [--vocab V]
//
// The machine is shared: take the median over steps, and read differences of a few
// percent as noise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/gpt.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "schedule/schedule_simulator.h"
#include "parallel/pipeline/stage_chunks.h"

namespace mt {
namespace {

struct Options {
  int steps = 7, warmup = 2, dim = 256, seq = 128, layers = 8, b = 2, vocab = 64;
  bool quick = false;
};

struct Measured {
  double bubble = 0;           // median over steps of the mean over ranks
  double imbalance = 0;        // median over steps of |busy0 - busy1| / window
  double F = 0, B = 0, W = 0;  // mean seconds per op (B includes W when fused)
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Measured run(const Options& o, const std::string& schedule, int m) {
  const int p = 2;
  ModelConfig cfg;
  cfg.layers = o.layers, cfg.dim = o.dim, cfg.heads = 4, cfg.seq = o.seq, cfg.vocab = o.vocab;
  std::vector<int> tokens(size_t(m) * o.b * o.seq), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int(uniform01(1, 1, i) * cfg.vocab);
    targets[i] = int(uniform01(1, 2, i) * cfg.vocab);
  }
  std::vector<std::vector<double>> busy(p), span(p);  // per rank, per recorded step
  std::vector<double> op_sum(3 * p, 0), op_count(3 * p, 0);
  run_local(p, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{p, 1, 1, 1});
    const int s = ctx.coord.pp;
    std::vector<int> layers(p, cfg.layers / p);  // equal stages: theory assumes them
    layers.back() += cfg.layers % p;
    GPT model(cfg, stage_chunk_specs(layers, p, s), TensorParallelShard{}, o.b);
    model.init(1);
    PipelineExecutor ex(make_schedule(schedule, p, m, 1), s, {&model.chunk(0)}, *ctx.pp,
                        PipelineShape{o.b, cfg.seq, cfg.dim});
    bool record = false;
    auto sink = [&](const std::string& name, const char* cat, double begin, double end) {
      if (!record || std::strcmp(cat, "compute") != 0) return;
      const char kind = name[1];  // "<stage><kind><mb>", one-digit stage
      const int k = kind == 'F' ? 0 : kind == 'B' ? 1 : 2;
      op_sum[3 * s + k] += end - begin;
      op_count[3 * s + k] += 1;
    };
    const float dloss = float(1.0 / (double(m) * o.b * cfg.seq));
    for (int step = 0; step < o.warmup + o.steps; ++step) {
      record = step >= o.warmup;
      model.zero_grads();
      ctx.world->barrier().wait();  // start together, as after an optimizer step
      const PipelineStepStats st = ex.run(tokens.data(), targets.data(), dloss, sink);
      if (record) busy[s].push_back(st.busy_seconds), span[s].push_back(st.step_seconds);
    }
  });
  Measured r;
  std::vector<double> per_step, imbalance;
  // As the trainer measures it (pipeline_bubble): idle against the slowest rank's step.
  for (size_t i = 0; i < busy[0].size(); ++i) {
    const double window = std::max(span[0][i], span[1][i]);
    per_step.push_back(1 - (busy[0][i] + busy[1][i]) / (2 * window));
    imbalance.push_back(std::abs(busy[0][i] - busy[1][i]) / window);
  }
  r.imbalance = median(imbalance);
  r.bubble = median(per_step);
  auto mean_op = [&](int k) {
    const double n = op_count[k] + op_count[3 + k];
    return n > 0 ? (op_sum[k] + op_sum[3 + k]) / n : 0;
  };
  r.F = mean_op(0), r.B = mean_op(1), r.W = mean_op(2);
  return r;
}

int main_impl(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--quick")
      o.quick = true, o.steps = 1, o.warmup = 0, o.dim = 64, o.seq = 16;
    else if (a == "--steps")
      o.steps = next();
    else if (a == "--dim")
      o.dim = next();
    else if (a == "--seq")
      o.seq = next();
    else if (a == "--layers")
      o.layers = next();
    else if (a == "--vocab")
      o.vocab = next();
    else {
      std::fprintf(
          stderr,
          "usage: bench_pp [--quick] [--steps N] [--dim C] [--seq T] [--layers L] [--vocab V]\n");
      return 2;
    }
  }
  std::printf(
      "pp 2 (threads, 1 compute thread each), layers %d, dim %d, seq %d, b %d, "
      "median of %d steps\n",
      o.layers, o.dim, o.seq, o.b, o.steps);
  std::printf("%-7s %4s %10s %10s %9s %10s\n", "sched", "m", "measured", "theory", "rel.err",
              "imbalance");
  const std::vector<int> ms = o.quick ? std::vector<int>{4} : std::vector<int>{4, 8, 16};
  Measured costs;
  for (int m : ms) {
    double one_f_one_b = 0;
    for (const std::string sched : {"1f1b", "zb-h1"}) {
      const Measured r = run(o, sched, m);
      const double theory = theoretical_bubble(make_schedule(sched, 2, m, 1));
      std::printf("%-7s %4d %9.1f%% %9.1f%% %8.1f%% %9.1f%%", sched.c_str(), m, 100 * r.bubble,
                  100 * theory, 100 * (r.bubble - theory) / theory, 100 * r.imbalance);
      if (sched == "1f1b") {
        one_f_one_b = r.bubble;
        std::printf("\n");
      } else {
        std::printf("   zb-h1 / 1f1b = %.2f\n", r.bubble / one_f_one_b);
        costs = r;
      }
    }
  }
  std::printf("measured per-op costs (zb-h1 run): F %.3f ms, B %.3f ms, W %.3f ms\n", 1e3 * costs.F,
              1e3 * costs.B, 1e3 * costs.W);
  const OpCosts c{costs.F, costs.B, costs.W, 0};
  std::printf("simulated with these costs (m = 2p .. 4p):\n%4s %4s %8s %8s\n", "pp", "m", "1f1b",
              "zb-h1");
  for (int p : {2, 4, 8})
    for (int m : {2 * p, 4 * p})
      std::printf("%4d %4d %7.1f%% %7.1f%%\n", p, m,
                  100 * simulate_schedule(make_schedule("1f1b", p, m, 1), c).bubble(),
                  100 * simulate_schedule(make_schedule("zb-h1", p, m, 1), c).bubble());
  return 0;
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  return mt::main_impl(argc, argv);
}
