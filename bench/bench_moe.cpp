// Mixture of experts against the dense model with the same ACTIVE parameters, and expert
// parallelism's cost (docs/moe.md, "Benchmark").
//
// Equal active parameters: an MoE layer runs k experts per token, each the dense MLP
// (hidden 4C), so its per-token MLP FLOPs equal a dense MLP of hidden k*4C. Rows:
//   layer  dense MLP, hidden 4C          (the dense GPT's MLP: half the MoE's active FLOPs at k=2)
//   layer  dense MLP, hidden k*4C        (equal active parameters: the fair comparison)
//   layer  MoE E, k, dropless, ep=1      (router + permutation + k experts' GEMMs)
//   model  dense GPT / MoE GPT           forward + backward of whole models (the GPT's dense
//                                        MLP has hidden 4C: its active params are printed)
//   dp=2   the MoE layer on 2 local ranks, 1 thread each, at ep=1 and ep=2 (experts split)
// and, for ep=2, the all-to-all bytes per iteration measured by the ep communicator against
// the formula: every routed (token, choice) whose expert lives on the other rank crosses 4
// times (dispatch and combine in forward, their adjoints in backward), C floats each, plus
// the counts exchange (E/ep int32 to each other rank per forward). A mismatch exits 1.
//
//   bench_moe [--quick] [--dim 256] [--tokens 1024] [--seq 128] [--layers 2] [--experts 8]
//             [--topk 2] [--steps 10] [--warmup 1] [--threads 1]
// Timings are medians over --steps after --warmup untimed iterations.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/gelu.h"
#include "kernels/matmul.h"
#include "model/gpt.h"
#include "model/moe_layer.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/parallel_context.h"

namespace {

using namespace mt;

struct Options {
  int dim = 256, tokens = 1024, seq = 128, layers = 2, experts = 8, topk = 2;
  int steps = 10, warmup = 1, threads = 1;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<float> randn(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(normal01(1, stream, i));
  return v;
}

double time_it(const Options& o, const std::function<void()>& fn) {
  for (int i = 0; i < o.warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < o.steps; ++i) {
    Stopwatch sw;
    fn();
    t.push_back(sw.elapsed());
  }
  return median(t);
}

struct MoeRun {
  ParamTable table;
  SlotLayout layout;
  std::unique_ptr<MoeLayer> layer;
  Arena params, grads, slot;
  std::vector<float> h, dy, y, dh;
  MoeRun(const ModelConfig& cfg, const ExpertParallelShard& ep, int N, uint64_t stream) {
    layer = std::make_unique<MoeLayer>(0, cfg, ep, N, table, layout);
    params.resize(table.total());
    grads.resize(table.total());
    table.init(params.data(), 1);
    layer->bind(params.data(), grads.data());
    slot.resize(layout.total());
    h = randn(size_t(N) * cfg.dim, stream);
    dy = randn(size_t(N) * cfg.dim, stream + 1);
    y.resize(h.size());
    dh.resize(h.size());
  }
  void step(int N) {
    layer->forward(slot.data(), h.data(), y.data(), N);
    layer->backward_input(slot.data(), h.data(), dy.data(), dh.data(), N);
    layer->backward_weight(slot.data(), h.data(), N);
  }
};

// Dense MLP with hidden Hd: the same kernel calls as Block's MLP.
double dense_seconds(const Options& o, int N, int C, int Hd) {
  std::vector<float> x = randn(size_t(N) * C, 7), dy = randn(size_t(N) * C, 8);
  std::vector<float> w1 = randn(size_t(Hd) * C, 9), b1(Hd), w2 = randn(size_t(C) * Hd, 10), b2(C);
  std::vector<float> dw1(w1.size()), db1(Hd), dw2(w2.size()), db2(C);
  std::vector<float> pre(size_t(N) * Hd), act(pre.size()), dact(pre.size()), y(x.size()),
      dx(x.size());
  return time_it(o, [&] {
    matmul_forward(pre.data(), x.data(), w1.data(), nullptr, N, C, Hd);
    bias_gelu_forward(act.data(), pre.data(), b1.data(), N, Hd);
    matmul_forward(y.data(), act.data(), w2.data(), b2.data(), N, Hd, C);
    std::memset(dact.data(), 0, dact.size() * sizeof(float));
    matmul_backward_input(dact.data(), dy.data(), w2.data(), N, Hd, C);
    gelu_backward(dact.data(), pre.data(), dact.data(), dact.size());
    std::memset(dx.data(), 0, dx.size() * sizeof(float));
    matmul_backward_input(dx.data(), dact.data(), w1.data(), N, C, Hd);
    matmul_backward_weight(dw2.data(), db2.data(), dy.data(), act.data(), N, Hd, C);
    matmul_backward_weight(dw1.data(), db1.data(), dact.data(), x.data(), N, C, Hd);
  });
}

// One worker's forward + backward of a whole GPT on N tokens (N / seq sequences).
double model_seconds(const Options& o, const ModelConfig& cfg, int N) {
  const int b = std::max(1, N / cfg.seq), T = cfg.seq;
  GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, b);
  model.init(1);
  std::vector<int> tokens(size_t(b) * T + 1);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int((i * 7919) % size_t(cfg.vocab));
  const float dloss = 1.0f / float(b * T);
  return time_it(o, [&] {
    model.zero_grads();
    model.train_microbatch(tokens.data(), tokens.data() + 1, b, T, dloss);
  });
}

// Active parameters per token (what flops_per_token counts, 6 FLOPs each).
double active_params(const ModelConfig& cfg) {
  return (cfg.flops_per_token() - 12.0 * cfg.layers * cfg.seq * cfg.dim) / 6.0;
}

void row(const char* kind, const std::string& what, double seconds, double tokens,
         const std::string& note) {
  std::printf("  %-6s %-40s %9.2f %11.0f  %s\n", kind, what.c_str(), 1e3 * seconds,
              tokens / seconds, note.c_str());
}

// The command line into o; false, after one line on stderr, where it is not understood.
bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--quick")
      o.dim = 64, o.tokens = 128, o.seq = 32, o.steps = 2;
    else if (a == "--dim")
      o.dim = next();
    else if (a == "--tokens")
      o.tokens = next();
    else if (a == "--seq")
      o.seq = next();
    else if (a == "--layers")
      o.layers = next();
    else if (a == "--experts")
      o.experts = next();
    else if (a == "--topk")
      o.topk = next();
    else if (a == "--steps" || a == "--iters")
      o.steps = next();
    else if (a == "--warmup")
      o.warmup = next();
    else if (a == "--threads")
      o.threads = next();
    else {
      std::fprintf(stderr, "bench_moe: unknown argument %s\n", a.c_str());
      return false;
    }
  }
  if (o.steps < 1 || o.warmup < 0 || o.tokens < o.seq || o.experts % 2 != 0) {
    std::fprintf(stderr,
                 "bench_moe: need --steps >= 1, --warmup >= 0, --tokens >= --seq and "
                 "an even --experts (ep = 2)\n");
    return false;
  }
  return true;
}

// The MoE model of the run (dropless); its dense twin is the same with no experts.
ModelConfig moe_config(const Options& o) {
  ModelConfig cfg;
  cfg.dim = o.dim, cfg.seq = o.seq, cfg.layers = o.layers, cfg.heads = std::max(1, o.dim / 64);
  cfg.experts = o.experts, cfg.topk = o.topk, cfg.capacity_factor = 0;
  return cfg;
}

// The "layer" and "model" rows: one worker, the dense MLPs and models against the MoE's.
void one_worker_rows(const Options& o, const ModelConfig& cfg) {
  ModelConfig dense = cfg;
  dense.experts = 0;
  const int N = o.tokens, C = o.dim, k = o.topk;
  const double t_dense1 = dense_seconds(o, N, C, cfg.hidden());
  const double t_densek = dense_seconds(o, N, C, k * cfg.hidden());
  MoeRun one(cfg, {}, N, 1);
  const double t_moe = time_it(o, [&] { one.step(N); });
  row("layer", "dense MLP, hidden 4C", t_dense1, N, "1/k of the MoE's active params");
  row("layer", "dense MLP, hidden k*4C", t_densek, N, "equal active params");
  row("layer", "MoE, ep=1", t_moe, N,
      str("tokens/s vs equal-active dense: x", double(int(100 * t_densek / t_moe)) / 100));
  const double t_model_dense = model_seconds(o, dense, N);
  const double t_model_moe = model_seconds(o, cfg, N);
  auto mparams = [](const ModelConfig& c) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3fM active of %.3fM params", active_params(c) / 1e6,
                  double(c.num_params()) / 1e6);
    return std::string(buf);
  };
  row("model", "dense GPT " + std::to_string(o.layers) + "L (MLP 4C)", t_model_dense, N,
      mparams(dense));
  row("model", "MoE GPT " + std::to_string(o.layers) + "L (every block)", t_model_moe, N,
      mparams(cfg));
}

// What rank 0 reports of the MoE layer on dp = 2 ranks at one ep.
struct EpMeasure {
  double seconds = 0;
  uint64_t bytes = 0, formula = 0;  // all-to-all bytes per iteration, both ranks
  size_t expert_floats = 0;         // rank 0's expert parameters
};

// The MoE layer on dp = 2 local ranks, one compute thread each, at this ep.
EpMeasure measure_ep(const Options& o, const ModelConfig& cfg, int ep) {
  const int N = o.tokens, C = o.dim;
  EpMeasure m;
  run_local(2, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, 2, 1, ep});
    TokenDispatcher dispatcher(ctx.ep);
    MoeRun r(cfg, {ctx.coord.ep_rank, ep, ep > 1 ? &dispatcher : nullptr}, N, 10 + ctx.coord.dp);
    auto step = [&] {
      ctx.dp->barrier().wait();
      r.step(N);
    };
    for (int i = 0; i < std::max(1, o.warmup); ++i) step();
    ctx.ep->reset_stats();
    r.layer->reset_stats();
    std::vector<double> ts;
    for (int i = 0; i < o.steps; ++i) {
      Stopwatch sw;
      step();
      ts.push_back(sw.elapsed());
    }
    // Rows this rank routed to the other rank's experts over the timed iterations.
    const MoeStats& st = r.layer->stats();
    int64_t remote = 0;
    for (int e = 0; e < o.experts; ++e)
      if (e / (o.experts / ep) != ctx.coord.ep_rank) remote += st.load[e];
    int64_t totals[2] = {remote, int64_t(ctx.ep->stats().bytes_sent)};
    ctx.dp->all_reduce(totals, totals, 2, DType::i64, ReduceOp::sum).wait();
    if (ctx.rank == 0) {
      m.seconds = median(ts);
      m.bytes = uint64_t(totals[1]) / uint64_t(o.steps);
      const int64_t counts = int64_t(ep) * (ep - 1) * (o.experts / ep) * 4 * o.steps;
      m.formula = uint64_t(4 * totals[0] * C * int64_t(sizeof(float)) + counts) / uint64_t(o.steps);
      for (const ParamInfo& p : r.table.entries())
        if (is_expert_param(p.name)) m.expert_floats += p.numel;
    }
  });
  return m;
}

// The "dp=2" row of one ep and, at ep > 1, its bytes against the formula; false on a
// mismatch.
bool ep_row(const Options& o, int ep, const EpMeasure& m) {
  const std::string what = "MoE, dp=2 ep=" + std::to_string(ep) + " (2 ranks, 1 thread each)";
  char note[64];
  std::snprintf(note, sizeof note, "expert params/rank %.2f MB", double(m.expert_floats) * 4e-6);
  row("dp=2", what, m.seconds, 2.0 * o.tokens, note);
  if (ep == 1) return true;
  std::printf(
      "         all-to-all bytes/iter (both ranks): measured %llu, formula "
      "4*remote_rows*C*4 + counts = %llu%s\n",
      (unsigned long long)m.bytes, (unsigned long long)m.formula,
      m.bytes == m.formula ? "" : "  MISMATCH");
  return m.bytes == m.formula;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, o)) return 2;
  const ModelConfig cfg = moe_config(o);
  std::printf(
      "bench_moe: N=%d tokens/iter, C=%d, E=%d, k=%d, dropless, %d thread(s), median of "
      "%d after %d warm-up\n",
      o.tokens, o.dim, o.experts, o.topk, o.threads, o.steps, o.warmup);
  std::printf("  %-6s %-40s %9s %11s  %s\n", "level", "config", "ms/iter", "tokens/s", "note");
  set_compute_threads(o.threads);
  one_worker_rows(o, cfg);
  // dp = 2 on the local backend, one compute thread per rank, ep = 1 vs ep = 2.
  bool bytes_ok = true;
  for (int ep : {1, 2}) bytes_ok = ep_row(o, ep, measure_ep(o, cfg, ep)) && bytes_ok;
  return bytes_ok ? 0 : 1;
}
