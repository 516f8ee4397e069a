// Issue 28's figure through the model (docs/moe.md, "Grouped experts"): the llama MoE layer
// (model/moe_layer.h: router, permutation, E SwiGLU experts of width F at top-k, dropless)
// forward + backward (B and W) against one dense SwiGLU MLP of width k F on the same tokens
// (the same active FLOPs), at the same width C, in fp32 and bf16. Three sides:
//   dense   the dense MLP through the dense layers' calls (matmul.h, matmul_bf16.h);
//   layer   the MoE layer as training runs it (grouped_gemm.h's default path: in fp32 the
//           loop below, measured faster; in bf16 the grouped AMX kernel);
//   grouped the same layer on the grouped kernel of its precision where that is not the
//           default (fp32: avx512), so the default's choice can be re-checked;
//   loop    the same layer with the grouped GEMMs forced to one oneDNN GEMM per expert
//           (GroupedGemmPath::loop).
// MFU counts the experts' (or the dense MLP's) GEMMs only, 18 N k C F FLOPs, against
// gemm_peak.h's peak; the layer's router and permutations are its overhead. Sides run
// interleaved, one batch each per round; "x dense" is the median over rounds of a side's
// MFU over the dense side's in the same round (load drifting between rounds cancels).
//
//   bench_moe_layer [--quick] [--cpu] [--rounds 5] [--tokens 1024] [--dim 512] [--experts 64]
//                   [--ffn 256] [--topk 8] [--precision fp32,bf16] [--router softmax|sigmoid]
//                   [--phases] [--parts P] [--no-token-sums]
// --no-token-sums sums the bf16 experts' rows into the tokens in passes of their own, not in
// the GEMMs' stores (ScopedGroupedGemmTokenSums: what the fusion saves, same binary).
// --parts P runs the layer sides with --moe-overlap-parts P (at ep 1 the exchanges are the
// identity: what parts cost the experts' compute).
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/arena.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/gemm_peak.h"
#include "kernels/grouped_gemm.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/phase_profile.h"
#include "kernels/swiglu.h"
#include "model/moe_layer.h"

namespace {

using namespace mt;

struct Options : bench::ExpertBenchOptions {
  std::string router = "softmax";
  bool phases = false;     // also print the layer's kernel phases per step (phase_profile.h)
  int parts = 1;           // --moe-overlap-parts of the layer sides (ep 1: the parts' compute)
  bool token_sums = true;  // the bf16 experts' sums in their GEMMs' stores (grouped_gemm.h)
};

// Where one step of a side goes by phase (kernels/phase_profile.h), averaged over `steps`
// steps after the rounds: the layer's overhead beside its GEMMs, on the same binary.
void print_phases(const char* prec, const char* side, const std::function<void()>& step,
                  int steps) {
  PhaseTotals totals;
  attach_phase_totals(&totals);
  for (int i = 0; i < steps; ++i) step();
  attach_phase_totals(nullptr);
  std::printf("  %-5s %-6s phases, ms per step:", prec, side);
  for (int p = 0; p < kPhases; ++p)
    if (totals.calls[p] > 0)
      std::printf(" %s %.2f (%llu calls)", phase_name(Phase(p)), totals.seconds[p] * 1e3 / steps,
                  static_cast<unsigned long long>(totals.calls[p] / steps));
  std::printf("\n");
}

// The dense SwiGLU MLP of width W on N rows, as the llama block's dense MLP calls it.
struct DenseMlp {
  bool half;
  int N, C, W;
  std::vector<float> w_gu, w_down, dw_gu, dw_down, x, gu, h, y, dy, dh, dgu, dx;
  std::vector<bf16> w_gu16, w_down16, x16, h16, dy16, dgu16;
  DenseMlp(bool b16, int n, int c, int w) : half(b16), N(n), C(c), W(w) {
    const size_t rows = size_t(N);
    w_gu = bench::filled(size_t(2) * W * C, 0.05f, 1),
    w_down = bench::filled(size_t(C) * W, 0.05f, 2);
    dw_gu.assign(w_gu.size(), 0), dw_down.assign(w_down.size(), 0);
    x = bench::filled(rows * C, 1.0f, 3), dy = bench::filled(rows * C, 1.0f, 4);
    gu.resize(rows * 2 * W), h.resize(rows * W), y.resize(rows * C), dh.resize(rows * W);
    dgu.resize(rows * 2 * W), dx.resize(rows * C);
    w_gu16.resize(w_gu.size()), w_down16.resize(w_down.size()), x16.resize(x.size());
    h16.resize(h.size()), dy16.resize(dy.size()), dgu16.resize(dgu.size());
    to_bf16(w_gu16.data(), w_gu.data(), w_gu.size());
    to_bf16(w_down16.data(), w_down.data(), w_down.size());
  }
  void step() {
    if (half) {
      to_bf16(x16.data(), x.data(), x.size());
      matmul_bf16_forward(gu.data(), x16.data(), w_gu16.data(), nullptr, N, C, 2 * W);
      swiglu_forward_bf16(h16.data(), gu.data(), N, W);
      matmul_bf16_forward(y.data(), h16.data(), w_down16.data(), nullptr, N, W, C);
      to_bf16(dy16.data(), dy.data(), dy.size());
      matmul_bf16_backward_input(dh.data(), dy16.data(), w_down16.data(), N, W, C, false);
      swiglu_backward_bf16(dgu16.data(), gu.data(), dh.data(), N, W);
      matmul_bf16_backward_input(dx.data(), dgu16.data(), w_gu16.data(), N, C, 2 * W, false);
      matmul_bf16_backward_weight(dw_down.data(), nullptr, dy16.data(), h16.data(), N, W, C);
      matmul_bf16_backward_weight(dw_gu.data(), nullptr, dgu16.data(), x16.data(), N, C, 2 * W);
      return;
    }
    matmul_forward(gu.data(), x.data(), w_gu.data(), nullptr, N, C, 2 * W);
    swiglu_forward(h.data(), gu.data(), N, W);
    matmul_forward(y.data(), h.data(), w_down.data(), nullptr, N, W, C);
    std::memset(dh.data(), 0, dh.size() * sizeof(float));
    matmul_backward_input(dh.data(), dy.data(), w_down.data(), N, W, C);
    swiglu_backward(dgu.data(), gu.data(), dh.data(), N, W, false);
    std::memset(dx.data(), 0, dx.size() * sizeof(float));
    matmul_backward_input(dx.data(), dgu.data(), w_gu.data(), N, C, 2 * W);
    matmul_backward_weight(dw_down.data(), nullptr, dy.data(), h.data(), N, W, C);
    matmul_backward_weight(dw_gu.data(), nullptr, dgu.data(), x.data(), N, C, 2 * W);
  }
};

// The model's llama MoE layer with its own table, arenas, slot and bf16 stage.
struct Layer {
  uint64_t version = 1;
  ParamTable table;
  SlotLayout layout;
  std::unique_ptr<MoeLayer> layer;
  Arena params, grads, slot, stage;
  std::vector<float> h, dy, y, dh;
  int N;
  Layer(const ModelConfig& cfg, bool bf16, int n, int parts) : N(n) {
    ExpertParallelShard ep;
    ep.overlap_parts = parts;
    if (bf16) ep.bf16_version = &version;
    layer = std::make_unique<MoeLayer>(0, cfg, ep, N, table, layout);
    params.resize(table.total()), grads.resize(table.total());
    table.init(params.data(), 1);
    layer->bind(params.data(), grads.data());
    slot.resize(layout.total());
    if (bf16) stage.resize(layer->bf16_stage_floats()), layer->set_bf16_stage(stage.data());
    h = bench::filled(size_t(N) * cfg.dim, 1.0f, 5), dy = bench::filled(h.size(), 1.0f, 6);
    y.resize(h.size()), dh.resize(h.size());
  }
  void step() {
    layer->forward(slot.data(), h.data(), y.data(), N);
    layer->backward_input(slot.data(), h.data(), dy.data(), dh.data(), N);
    layer->backward_weight(slot.data(), h.data(), N);
  }
};

struct Side {
  const char* name;
  std::function<void()> step;
  std::optional<GroupedGemmPath> path;  // forced for this side (default: none)
  std::vector<double> seconds;
};

void bench_precision(const Options& o, bool bf16) {
  ModelConfig cfg;
  cfg.arch = Arch::llama;
  cfg.layers = 1, cfg.dim = o.dim, cfg.heads = std::max(1, o.dim / 64), cfg.seq = o.tokens;
  cfg.experts = o.experts, cfg.topk = o.topk, cfg.expert_ffn_dim = o.ffn;
  cfg.capacity_factor = 0;
  cfg.router = o.router == "sigmoid" ? RouterScore::sigmoid : RouterScore::softmax;
  // The trainer's mfu denominator, measured as it measures it (kernels/gemm_peak.h).
  const PeakPrecision pp = bf16 ? PeakPrecision::bf16 : PeakPrecision::fp32;
  const GemmPeak measured = measure_gemm_peak(pp, 1, o.quick ? 0.05 : kPeakSeconds);
  const double peak = measured.gflops;
  std::printf("  %s; grouped path %s\n", describe_gemm_peak(pp, measured, 1).c_str(),
              grouped_gemm_isa(bf16).c_str());
  DenseMlp dense(bf16, o.tokens, o.dim, o.topk * o.ffn);
  Layer layer(cfg, bf16, o.tokens, o.parts), looped(cfg, bf16, o.tokens, o.parts);
  std::vector<Side> sides = {{"dense", [&] { dense.step(); }, {}, {}},
                             {"layer", [&] { layer.step(); }, {}, {}}};
  std::unique_ptr<Layer> grouped;
  if (!bf16 && grouped_gemm_path_available(false, GroupedGemmPath::avx512)) {
    grouped = std::make_unique<Layer>(cfg, bf16, o.tokens, o.parts);
    sides.push_back({"avx512", [&] { grouped->step(); }, GroupedGemmPath::avx512, {}});
  }
  sides.push_back({"loop", [&] { looped.step(); }, GroupedGemmPath::loop, {}});
  const double batch_s = o.quick ? 0.0 : 0.5;
  for (int r = -1; r < o.rounds; ++r) {  // round -1: warm-up
    for (Side& s : sides) {
      std::unique_ptr<ScopedGroupedGemmPath> path;
      if (s.path) path = std::make_unique<ScopedGroupedGemmPath>(bf16, *s.path);
      const double t = bench::batch_seconds(s.step, batch_s, o.cpu);
      if (r >= 0) s.seconds.push_back(t);
    }
  }
  const double flops = 18.0 * o.tokens * o.topk * double(o.dim) * o.ffn;
  for (const Side& s : sides) {
    std::vector<double> mfu, ratio;
    for (size_t r = 0; r < s.seconds.size(); ++r) {
      mfu.push_back(flops / s.seconds[r] * 1e-9 / peak);
      ratio.push_back(sides[0].seconds[r] / s.seconds[r]);
    }
    std::printf("  %-5s %-6s %9.2f %8.0f %6.3f %7.2f\n", bf16 ? "bf16" : "fp32", s.name,
                bench::median(s.seconds) * 1e3, flops / bench::median(s.seconds) * 1e-9,
                bench::median(mfu), bench::median(ratio));
  }
  if (!o.phases) return;
  const int steps = o.quick ? 1 : 5;
  print_phases(bf16 ? "bf16" : "fp32", "dense", sides[0].step, steps);
  print_phases(bf16 ? "bf16" : "fp32", "layer", sides[1].step, steps);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    if (bench::parse_expert_bench_arg(argc, argv, i, o)) continue;
    if (!std::strcmp(argv[i], "--router") && i + 1 < argc) {
      o.router = argv[++i];
    } else if (!std::strcmp(argv[i], "--phases")) {
      o.phases = true;
    } else if (!std::strcmp(argv[i], "--parts") && i + 1 < argc) {
      o.parts = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--no-token-sums")) {
      o.token_sums = false;
    } else {
      std::fprintf(stderr,
                   "usage: bench_moe_layer [--quick] [--cpu] [--rounds N] [--tokens N] [--dim C] "
                   "[--experts E] [--ffn F] [--topk k] [--precision fp32,bf16] "
                   "[--router softmax|sigmoid] [--phases] [--parts P] [--no-token-sums]\n");
      return 2;
    }
  }
  set_compute_threads(1);
  const ScopedGroupedGemmTokenSums sums(o.token_sums);
  std::printf(
      "llama MoE layer (model/moe_layer.h) forward + backward: %d SwiGLU experts of width %d "
      "at top-%d, %s router, dropless, vs one dense SwiGLU MLP of width %d; C %d, %d tokens; "
      "%d part(s); token sums %s; 1 thread; medians of %d interleaved rounds (%s time); load "
      "average %.2f\n",
      o.experts, o.ffn, o.topk, o.router.c_str(), o.topk * o.ffn, o.dim, o.tokens, o.parts,
      o.token_sums ? "in the GEMMs' stores" : "in passes", o.rounds, o.cpu ? "CPU" : "wall",
      bench::load_average());
  std::printf("  %-5s %-6s %9s %8s %6s %7s\n", "prec", "side", "ms", "GF/s", "MFU", "x dense");
  for (const std::string& p : o.precisions) {
    if (p == "bf16" && !bf16_matmul_supported()) {
      std::printf("  bf16: no oneDNN bf16 matmul on this CPU, skipped\n");
      continue;
    }
    bench_precision(o, p == "bf16");
  }
  std::printf("load average after: %.2f\n", bench::load_average());
  return 0;
}
