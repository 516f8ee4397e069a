// Many small experts against one dense MLP of the same active FLOPs (issue 28, item 2): a
// SwiGLU MLP forward + backward (B and W) three ways, at the same model width C:
//   dense    one MLP of width k F on N tokens, through the dense layers' calls (matmul.h,
//            matmul_bf16.h) -- the yardstick;
//   grouped  E experts of width F on the k N routed rows, expert-major, each GEMM one
//            grouped call over all experts (kernels/grouped_gemm.h);
//   loop     the same experts, one matmul call per expert (the grouped GEMMs' loop path,
//            ScopedGroupedGemmPath: what an expert layer runs without grouped kernels).
// Defaults: E = 64, F = 256, k = 8 (dense width 2048), C = 512, N = 1024. Rows spread
// evenly (N k / E each) or skewed: Zipf(1) over the first E - 4 experts, each capped at N
// rows (a token picks an expert once), the last 4 idle, so row counts are uneven, mostly
// not multiples of a tile, some zero. A variant of R rows of width F does 18 R C F FLOPs
// (forward 6, backward 12): 18 N k C F for the dense MLP and the even experts; MFU is
// against the GEMM peak of gemm_peak.h. The variants run interleaved, one batch each per
// round over --rounds rounds; the table gives medians, and "x dense" the median over rounds
// of a variant's MFU over the dense MLP's in the same round. The 1-minute load average is
// printed before and after (the machine may be shared); --cpu times with the process's
// CPU time divided by the threads (less disturbed by other load than wall time). The SwiGLU and,
// in bf16, the roundings of activations and gradients (as the Llama block does them) are in
// all three; the bf16 weight copies are made once outside the timing.
//
//   bench_experts [--quick] [--cpu] [--threads 1,2] [--rounds 5] [--tokens 1024] [--dim 512]
//                 [--experts 64] [--ffn 256] [--topk 8] [--precision fp32,bf16]
//                 [--path portable|loop|avx512|avx512_bf16|amx]   (the grouped variant's
//                 path, for the precision that has it; default: grouped_gemm.h's choice)
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "core/timer.h"
#include "kernels/bf16.h"
#include "kernels/gemm_peak.h"
#include "kernels/grouped_gemm.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/swiglu.h"

namespace {

using mt::bf16;

struct Options : mt::bench::ExpertBenchOptions {
  std::vector<int> threads = {1};
  std::string path;  // --path: the grouped variant's GroupedGemmPath where its precision has it
};

// "amx" etc. (the enumerator's name), or nullopt.
std::optional<mt::GroupedGemmPath> parse_path(const std::string& name) {
  using P = mt::GroupedGemmPath;
  const std::pair<const char*, P> names[] = {{"portable", P::portable},
                                             {"loop", P::loop},
                                             {"avx512", P::avx512},
                                             {"avx512_bf16", P::avx512_bf16},
                                             {"amx", P::amx}};
  for (const auto& [n, p] : names)
    if (name == n) return p;
  return std::nullopt;
}

// Rows per expert: even, or skewed (see the header).
std::vector<int32_t> expert_offsets(const Options& o, bool skewed) {
  const int E = o.experts, active = skewed ? std::max(1, E - 4) : E;
  const int64_t total = int64_t(o.tokens) * o.topk;
  std::vector<double> share(E, 0.0);
  for (int e = 0; e < active; e++) share[e] = skewed ? 1.0 / (e + 1) : 1.0;
  // Water-fill: cap at N rows, hand what is left to the experts under the cap.
  std::vector<int64_t> rows(E, 0);
  int64_t left = total;
  for (int pass = 0; pass < E && left > 0; pass++) {
    double sum = 0;
    for (int e = 0; e < E; e++) sum += rows[e] < o.tokens ? share[e] : 0.0;
    if (sum == 0) break;
    const int64_t before = left;
    for (int e = 0; e < E && left > 0; e++) {
      if (rows[e] >= o.tokens || share[e] == 0) continue;
      const int64_t want = std::max<int64_t>(1, std::llround(before * share[e] / sum));
      const int64_t add = std::min({want, int64_t(o.tokens) - rows[e], left});
      rows[e] += add, left -= add;
    }
  }
  std::vector<int32_t> offset(E + 1, 0);
  for (int e = 0; e < E; e++) offset[e + 1] = offset[e] + int32_t(rows[e]);
  return offset;
}

enum class Variant { dense, grouped, loop };

// One SwiGLU MLP (groups = 1: dense) with its activations, expert-major.
struct Mlp {
  Variant variant;
  bool half;  // bf16 GEMM operands
  int C, F, G, R;
  std::vector<int32_t> offset;
  std::vector<float> w_gu, w_down, dw_gu, dw_down;  // per group (2F, C), (C, F)
  std::vector<bf16> w_gu16, w_down16;
  std::vector<const float*> gu_w, down_w;
  std::vector<const bf16*> gu_w16, down_w16;
  std::vector<float*> gu_dw, down_dw;
  std::vector<float> x, gu, h, y, dy, dh, dgu, dx;  // fp32 activations
  std::vector<bf16> x16, h16, dy16, dgu16;          // bf16 GEMM operands

  Mlp(Variant v, bool b16, int C_, int F_, std::vector<int32_t> off)
      : variant(v),
        half(b16),
        C(C_),
        F(F_),
        G(int(off.size()) - 1),
        R(off.back()),
        offset(std::move(off)) {
    const size_t wg = size_t(2) * F * C, wd = size_t(C) * F, rows = size_t(R);
    w_gu = mt::bench::filled(G * wg, 0.05f, 1), w_down = mt::bench::filled(G * wd, 0.05f, 2);
    dw_gu.assign(G * wg, 0.0f), dw_down.assign(G * wd, 0.0f);
    w_gu16.resize(w_gu.size()), w_down16.resize(w_down.size());
    mt::to_bf16(w_gu16.data(), w_gu.data(), w_gu.size());
    mt::to_bf16(w_down16.data(), w_down.data(), w_down.size());
    for (int g = 0; g < G; g++) {
      gu_w.push_back(&w_gu[g * wg]), down_w.push_back(&w_down[g * wd]);
      gu_w16.push_back(&w_gu16[g * wg]), down_w16.push_back(&w_down16[g * wd]);
      gu_dw.push_back(&dw_gu[g * wg]), down_dw.push_back(&dw_down[g * wd]);
    }
    x = mt::bench::filled(rows * C, 1.0f, 3), dy = mt::bench::filled(rows * C, 1.0f, 4);
    gu.resize(rows * 2 * F), h.resize(rows * F), y.resize(rows * C), dh.resize(rows * F);
    dgu.resize(rows * 2 * F), dx.resize(rows * C);
    x16.resize(rows * C), h16.resize(rows * F), dy16.resize(rows * C), dgu16.resize(rows * 2 * F);
    mt::to_bf16(x16.data(), x.data(), x.size());
  }
};

// out = in @ W^T per group, W (OC, IN): the forward of a linear.
void linear_forward(Mlp& m, float* out, const float* in, const bf16* in16,
                    const std::vector<const float*>& w, const std::vector<const bf16*>& w16, int IN,
                    int OC) {
  if (m.variant == Variant::dense) {
    if (m.half) return mt::matmul_bf16_forward(out, in16, w16[0], nullptr, m.R, IN, OC);
    return mt::matmul_forward(out, in, w[0], nullptr, m.R, IN, OC);
  }
  if (m.half)
    return mt::grouped_matmul_bf16_forward(out, in16, w16.data(), m.offset.data(), m.G, IN, OC);
  mt::grouped_matmul_forward(out, in, w.data(), m.offset.data(), m.G, IN, OC);
}

// din = dout @ W per group (overwritten); dW += dout^T @ in.
void linear_backward(Mlp& m, float* din, const float* dout, const bf16* dout16, const float* in,
                     const bf16* in16, const std::vector<const float*>& w,
                     const std::vector<const bf16*>& w16, const std::vector<float*>& dw, int IN,
                     int OC) {
  const int32_t* off = m.offset.data();
  if (m.variant == Variant::dense && m.half) {
    mt::matmul_bf16_backward_input(din, dout16, w16[0], m.R, IN, OC, false);
    mt::matmul_bf16_backward_weight(dw[0], nullptr, dout16, in16, m.R, IN, OC);
  } else if (m.variant == Variant::dense) {
    std::memset(din, 0, size_t(m.R) * IN * sizeof(float));
    mt::matmul_backward_input(din, dout, w[0], m.R, IN, OC);
    mt::matmul_backward_weight(dw[0], nullptr, dout, in, m.R, IN, OC);
  } else if (m.half) {
    mt::grouped_matmul_bf16_backward_input(din, dout16, w16.data(), off, m.G, IN, OC, false);
    mt::grouped_matmul_bf16_backward_weight(dw.data(), dout16, in16, off, m.G, IN, OC);
  } else {
    mt::grouped_matmul_backward_input(din, dout, w.data(), off, m.G, IN, OC, false);
    mt::grouped_matmul_backward_weight(dw.data(), dout, in, off, m.G, IN, OC);
  }
}

void forward(Mlp& m) {
  linear_forward(m, m.gu.data(), m.x.data(), m.x16.data(), m.gu_w, m.gu_w16, m.C, 2 * m.F);
  if (m.half)
    mt::swiglu_forward_bf16(m.h16.data(), m.gu.data(), m.R, m.F);
  else
    mt::swiglu_forward(m.h.data(), m.gu.data(), m.R, m.F);
  linear_forward(m, m.y.data(), m.h.data(), m.h16.data(), m.down_w, m.down_w16, m.F, m.C);
}

void backward(Mlp& m) {
  if (m.half) mt::to_bf16(m.dy16.data(), m.dy.data(), m.dy.size());
  linear_backward(m, m.dh.data(), m.dy.data(), m.dy16.data(), m.h.data(), m.h16.data(), m.down_w,
                  m.down_w16, m.down_dw, m.F, m.C);
  if (m.half)
    mt::swiglu_backward_bf16(m.dgu16.data(), m.gu.data(), m.dh.data(), m.R, m.F);
  else
    mt::swiglu_backward(m.dgu.data(), m.gu.data(), m.dh.data(), m.R, m.F, false);
  linear_backward(m, m.dx.data(), m.dgu.data(), m.dgu16.data(), m.x.data(), m.x16.data(), m.gu_w,
                  m.gu_w16, m.gu_dw, m.C, 2 * m.F);
}

const char* variant_name(Variant v) {
  return v == Variant::dense ? "dense" : v == Variant::grouped ? "grouped" : "loop";
}

// One variant of the comparison, its timings one per round.
struct Side {
  std::string name, spread;
  std::unique_ptr<Mlp> mlp;
  double flops;  // 18 R C F: forward 6, backward 12, R rows of width F each
  int max_rows;
  std::vector<double> fwd, bwd;
  double mfu(size_t r, double peak) const { return flops / (fwd[r] + bwd[r]) * 1e-9 / peak; }
};

Side make_side(Variant v, const char* spread, bool bf16, int C, int F, std::vector<int32_t> off) {
  int largest = 0;
  for (size_t e = 0; e + 1 < off.size(); e++) largest = std::max(largest, off[e + 1] - off[e]);
  const double flops = 18.0 * off.back() * C * F;
  return {variant_name(v),
          spread,
          std::make_unique<Mlp>(v, bf16, C, F, std::move(off)),
          flops,
          largest,
          {},
          {}};
}

// One round of one side: a batch of forwards, then of backwards.
void time_round(Side& s, const Options& o) {
  std::unique_ptr<mt::ScopedGroupedGemmPath> loop;
  if (s.mlp->variant == Variant::loop)
    loop = std::make_unique<mt::ScopedGroupedGemmPath>(s.mlp->half, mt::GroupedGemmPath::loop);
  const double batch_s = o.quick ? 0.0 : 0.3;
  const int threads = omp_get_max_threads();
  s.fwd.push_back(mt::bench::batch_seconds([&] { forward(*s.mlp); }, batch_s, o.cpu, threads));
  s.bwd.push_back(mt::bench::batch_seconds([&] { backward(*s.mlp); }, batch_s, o.cpu, threads));
}

// Medians over the rounds; "x dense" is the median over rounds of this side's MFU over the
// dense side's in the same round, so that load which drifts between rounds cancels out.
void print_side(const Side& s, const Side& dense, bool bf16, double peak) {
  const double fwd = mt::bench::median(s.fwd), bwd = mt::bench::median(s.bwd);
  std::vector<double> mfu, ratio;
  for (size_t r = 0; r < s.fwd.size(); r++) {
    mfu.push_back(s.mfu(r, peak));
    ratio.push_back(s.mfu(r, peak) / dense.mfu(r, peak));
  }
  std::printf("  %-5s %-8s %-7s %6d %8.2f %8.2f %8.2f %8.0f %6.3f %7.2f\n", bf16 ? "bf16" : "fp32",
              s.name.c_str(), s.spread.c_str(), s.max_rows, fwd * 1e3, bwd * 1e3, (fwd + bwd) * 1e3,
              s.flops / (fwd + bwd) * 1e-9, mt::bench::median(mfu), mt::bench::median(ratio));
}

// Every side in turn within a round, o.rounds rounds: interleaved, so that the machine's
// load falls on all sides alike.
void bench_precision(const Options& o, bool bf16, double peak) {
  std::vector<Side> sides;
  sides.push_back(make_side(Variant::dense, "-", bf16, o.dim, o.topk * o.ffn, {0, o.tokens}));
  for (const bool skewed : {false, true})
    for (const Variant v : {Variant::grouped, Variant::loop})
      sides.push_back(
          make_side(v, skewed ? "skewed" : "even", bf16, o.dim, o.ffn, expert_offsets(o, skewed)));
  for (Side& s : sides) {  // warm-up: page faults, oneDNN primitives, thread start
    time_round(s, o);
    s.fwd.clear(), s.bwd.clear();
  }
  for (int r = 0; r < o.rounds; r++)
    for (Side& s : sides) time_round(s, o);
  for (const Side& s : sides) print_side(s, sides[0], bf16, peak);
}

void bench(const Options& o) {
  std::printf("  %-5s %-8s %-7s %6s %8s %8s %8s %8s %6s %7s\n", "prec", "variant", "spread",
              "max_r", "fwd ms", "bwd ms", "all ms", "GF/s", "MFU", "x dense");
  for (const std::string& p : o.precisions) {
    const bool bf16 = p == "bf16";
    if (bf16 && !mt::bf16_matmul_supported()) {
      std::printf("  bf16: no oneDNN bf16 matmul on this CPU, skipped\n");
      continue;
    }
    const double budget = o.quick ? 0.05 : 1.5, threads = omp_get_max_threads();
    const double peak = bf16 ? mt::measure_bf16_gemm_peak_gflops(threads, budget)
                             : mt::measure_sgemm_peak_gflops(threads, budget);
    std::unique_ptr<mt::ScopedGroupedGemmPath> forced;
    const std::optional<mt::GroupedGemmPath> path = parse_path(o.path);
    if (path && mt::grouped_gemm_path_available(bf16, *path))
      forced = std::make_unique<mt::ScopedGroupedGemmPath>(bf16, *path);
    std::printf("  %s: GEMM peak %.0f GFLOP/s (gemm_peak.h); grouped path %s\n", p.c_str(), peak,
                mt::grouped_gemm_isa(bf16).c_str());
    bench_precision(o, bf16, peak);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    if (mt::bench::parse_expert_bench_arg(argc, argv, i, o)) continue;
    const auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--threads")) {
      o.threads = mt::bench::parse_list(argv[++i]);
    } else if (arg("--path") && parse_path(argv[i + 1])) {
      o.path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_experts [--quick] [--cpu] [--threads 1,2] [--rounds N] "
                   "[--tokens N] [--dim C] [--experts E] [--ffn F] [--topk k] "
                   "[--precision fp32,bf16] [--path portable|loop|avx512|avx512_bf16|amx]\n");
      return 2;
    }
  }
  for (const int threads : o.threads) {
    omp_set_num_threads(std::max(1, threads));
    std::printf(
        "SwiGLU MLP forward + backward: %d experts of width %d at top-%d vs dense width %d; "
        "C %d, %d tokens; %d thread%s; medians of %d interleaved rounds, %s time; "
        "load average %.2f\n",
        o.experts, o.ffn, o.topk, o.topk * o.ffn, o.dim, o.tokens, threads, threads == 1 ? "" : "s",
        o.rounds, o.cpu ? "CPU" : "wall", mt::bench::load_average());
    bench(o);
    std::printf("load average after: %.2f\n", mt::bench::load_average());
  }
  return 0;
}
