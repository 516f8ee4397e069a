// The MoE layer's forward + backward (B and W) against the dense MLP with the same active
// parameters (hidden k * 4C: k experts' worth), on one rank; then dp = 2 on the local
// backend at ep = 1 and ep = 2, with the all-to-all bytes against the formula (each routed
// token's C floats go to its expert's rank and back, in forward and in backward, when that
// rank is another one).
//
//   bench_moe [--quick] [--dim 256] [--tokens 1024] [--experts 8] [--topk 2] [--iters 10]
//             [--threads 1]
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
#include "model/moe_layer.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/parallel_context.h"

namespace {

using namespace mt;

struct Options {
  int dim = 256, tokens = 1024, experts = 8, topk = 2, iters = 10, threads = 1;
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

double time_it(int iters, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    Stopwatch sw;
    fn();
    t.push_back(sw.elapsed());
  }
  return median(t);
}

// Dense MLP with hidden Hd: the same kernel calls as Block's MLP.
double dense_seconds(int N, int C, int Hd, int iters) {
  std::vector<float> x = randn(size_t(N) * C, 7), dy = randn(size_t(N) * C, 8);
  std::vector<float> w1 = randn(size_t(Hd) * C, 9), b1(Hd), w2 = randn(size_t(C) * Hd, 10), b2(C);
  std::vector<float> dw1(w1.size()), db1(Hd), dw2(w2.size()), db2(C);
  std::vector<float> pre(size_t(N) * Hd), act(pre.size()), dact(pre.size()), y(x.size()),
      dx(x.size());
  return time_it(iters, [&] {
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

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--quick")
      o.dim = 64, o.tokens = 128, o.iters = 2;
    else if (a == "--dim")
      o.dim = next();
    else if (a == "--tokens")
      o.tokens = next();
    else if (a == "--experts")
      o.experts = next();
    else if (a == "--topk")
      o.topk = next();
    else if (a == "--iters")
      o.iters = next();
    else if (a == "--threads")
      o.threads = next();
    else {
      std::fprintf(stderr, "bench_moe: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  ModelConfig cfg;
  cfg.dim = o.dim, cfg.experts = o.experts, cfg.topk = o.topk, cfg.capacity_factor = 0;
  const int N = o.tokens, C = o.dim;
  std::printf("MoE layer fwd+bwd: N=%d tokens, C=%d, E=%d, k=%d, dropless, %d thread(s)\n", N, C,
              o.experts, o.topk, o.threads);

  set_compute_threads(o.threads);
  MoeRun one(cfg, {}, N, 1);
  const double t_moe = time_it(o.iters, [&] { one.step(N); });
  const double t_dense = dense_seconds(N, C, o.topk * cfg.hidden(), o.iters);
  std::printf("  %-34s %8.2f ms  %10.0f tok/s\n", "MoE (ep=1)", 1e3 * t_moe, N / t_moe);
  std::printf("  %-34s %8.2f ms  %10.0f tok/s\n", "dense MLP, hidden k*4C", 1e3 * t_dense,
              N / t_dense);
  std::printf("  MoE / dense tokens/s: %.2f\n", t_dense / t_moe);

  // dp = 2 on the local backend, one compute thread per rank, ep = 1 vs ep = 2.
  for (int ep : {1, 2}) {
    double t = 0;
    uint64_t bytes = 0, formula = 0;
    size_t expert_floats = 0;
    run_local(2, WorldOptions{}, [&](CommWorld& w) {
      set_compute_threads(1);
      ParallelContext ctx = make_parallel_context(w, MeshShape{1, 2, 1, ep});
      TokenDispatcher dispatcher(ctx.ep);
      MoeRun r(cfg, {ctx.coord.ep_rank, ep, ep > 1 ? &dispatcher : nullptr}, N, 10 + ctx.coord.dp);
      auto step = [&] {
        ctx.dp->barrier().wait();
        r.step(N);
      };
      step();
      ctx.ep->reset_stats();
      std::vector<double> ts;
      for (int i = 0; i < o.iters; ++i) {
        Stopwatch sw;
        step();
        ts.push_back(sw.elapsed());
      }
      // Rows this rank routes to the other rank's experts per forward (same input every
      // iteration). Each such row crosses twice in forward (dispatch, combine) and twice in
      // backward; summed over both ranks that is the formula (counts exchange excluded).
      const MoeStats& st = r.layer->stats();
      int64_t remote = 0;
      for (int e = 0; e < o.experts; ++e)
        if (e / (o.experts / ep) != ctx.coord.ep_rank) remote += st.load[e];
      remote /= st.groups;
      int64_t totals[2] = {remote, int64_t(ctx.ep->stats().bytes_sent / uint64_t(o.iters))};
      ctx.dp->all_reduce(totals, totals, 2, DType::i64, ReduceOp::sum).wait();
      if (ctx.rank == 0) {
        t = median(ts);
        bytes = uint64_t(totals[1]);
        formula = uint64_t(4 * totals[0] * C * sizeof(float));
        for (const ParamInfo& p : r.table.entries())
          if (is_expert_param(p.name)) expert_floats += p.numel;
      }
    });
    std::printf(
        "  dp=2 ep=%d: %8.2f ms/iter per rank  %10.0f tok/s (both ranks)  expert params"
        " per rank %.2f MB  a2a bytes/iter (both ranks) %llu, formula 4*remote_rows*C*4 = %llu\n",
        ep, 1e3 * t, 2 * N / t, expert_floats * 4e-6, (unsigned long long)bytes,
        (unsigned long long)formula);
  }
  return 0;
}
