// Every linear-layer GEMM of a GPT training step, one at a time, on each routine that can
// run it, with its share of the GEMM peak (kernels/gemm_peak.h, the mfu denominator): the
// per-GEMM table of issue #33 (docs/performance.md, "Stop 43: the GEMMs themselves").
// For each linear (qkv, attn_proj, fc, mlp_proj, the head) the forward with its bias (none
// for the head), the input gradient and the weight gradient with its bias gradient, as the
// step calls them (kernels/matmul.h, kernels/matmul_bf16.h). The routines are alternated
// round by round (which goes first rotates); medians over the rounds.
//
//   bench_linear_gemms [--quick] [--rounds 5] [--threads 1] [--cpu]
//                      [--shapes d128,d256,d512] [--precision fp32,bf16] [--vocab 256]
//     d128  4L d128 T128 B16 (the quick start's rank: 2048 rows)
//     d256  4L d256 T128 B8 (1024 rows)
//     d512  6L d512 T256 B8 (2048 rows)
//   fp32 routines (sgemm for all): by_shape (the weight gradient of a layer with OC >= 4 C
//   and at most 2^20 weights computed transposed, the default: kernels/matmul_weight_grad.h)
//   and plain (every product as stored);
//   bf16: mixed, jit_gemm and primitive (those available here).
//   --cpu times the process's CPU time per thread (what a loaded machine disturbs least).
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kernels/bf16.h"
#include "kernels/gemm_peak.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/matmul_weight_grad.h"

namespace {

struct Options {
  bool quick = false, cpu = false;
  int rounds = 5, threads = 1, vocab = 256;
  std::vector<std::string> shapes = {"d256"}, precisions = {"fp32", "bf16"};
};

struct Layer {
  std::string name;
  int N, C, OC;
  bool bias;
};

std::vector<Layer> layers_of(const std::string& set, int vocab) {
  const int N = set == "d256" ? 1024 : 2048, C = set == "d128" ? 128 : set == "d256" ? 256 : 512;
  return {{"qkv", N, C, 3 * C, true},
          {"attn_proj", N, C, C, true},
          {"fc", N, C, 4 * C, true},
          {"mlp_proj", N, 4 * C, C, true},
          {"head", N, C, vocab, false}};
}

// One routine the products can take, set for the duration of a call.
struct Way {
  std::string name;
  std::function<void(const std::function<void()>&)> under;
};

std::vector<Way> ways_of(const std::string& precision) {
  std::vector<Way> ways;
  if (precision == "fp32") {
    for (const auto path : {mt::Fp32WeightGradPath::by_shape, mt::Fp32WeightGradPath::plain})
      ways.push_back({path == mt::Fp32WeightGradPath::by_shape ? "by_shape" : "plain",
                      [path](const std::function<void()>& fn) {
                        const mt::ScopedFp32WeightGradPath use(path);
                        fn();
                      }});
    return ways;
  }
  const std::pair<mt::Bf16GemmPath, const char*> paths[] = {
      {mt::Bf16GemmPath::mixed, "mixed"},
      {mt::Bf16GemmPath::jit_gemm, "jit_gemm"},
      {mt::Bf16GemmPath::primitive, "primitive"}};
  for (const auto& [path, name] : paths)
    if (mt::matmul_bf16_path_available(path))
      ways.push_back({name, [path = path](const std::function<void()>& fn) {
                        const mt::ScopedBf16GemmPath use(path);
                        fn();
                      }});
  return ways;
}

// The three products of one linear at one precision, on whichever routine is set.
struct Products {
  Layer l;
  std::vector<float> x, w, b, dy, y, dx, dw, db;
  std::vector<mt::bf16> x16, w16, dy16;
  explicit Products(const Layer& layer)
      : l(layer),
        x(mt::bench::filled(size_t(l.N) * l.C, 2.0f, 7)),
        w(mt::bench::filled(size_t(l.OC) * l.C, 0.1f, 8)),
        b(mt::bench::filled(size_t(l.OC), 0.1f, 9)),
        dy(mt::bench::filled(size_t(l.N) * l.OC, 2.0f, 10)),
        y(size_t(l.N) * l.OC),
        dx(size_t(l.N) * l.C),
        dw(w.size()),
        db(b.size()),
        x16(x.size()),
        w16(w.size()),
        dy16(dy.size()) {
    mt::to_bf16(x16.data(), x.data(), x.size());
    mt::to_bf16(w16.data(), w.data(), w.size());
    mt::to_bf16(dy16.data(), dy.data(), dy.size());
  }
  std::vector<std::function<void()>> of(const std::string& precision) {
    const float* bias = l.bias ? b.data() : nullptr;
    float* dbias = l.bias ? db.data() : nullptr;
    if (precision == "fp32")
      return {
          [=, this] { mt::matmul_forward(y.data(), x.data(), w.data(), bias, l.N, l.C, l.OC); },
          [=, this] { mt::matmul_backward_input(dx.data(), dy.data(), w.data(), l.N, l.C, l.OC); },
          [=, this] {
            mt::matmul_backward_weight(dw.data(), dbias, dy.data(), x.data(), l.N, l.C, l.OC);
          }};
    return {[=, this] {
              mt::matmul_bf16_forward(y.data(), x16.data(), w16.data(), bias, l.N, l.C, l.OC);
            },
            [=, this] {
              mt::matmul_bf16_backward_input(dx.data(), dy16.data(), w16.data(), l.N, l.C, l.OC,
                                             false);
            },
            [=, this] {
              mt::matmul_bf16_backward_weight(dw.data(), dbias, dy16.data(), x16.data(), l.N, l.C,
                                              l.OC);
            }};
  }
};

void run_table(const std::string& set, const std::string& precision, const Options& o) {
  const mt::GemmPeak peak =
      mt::measure_gemm_peak(precision == "fp32" ? mt::PeakPrecision::fp32 : mt::PeakPrecision::bf16,
                            o.threads, o.quick ? 0.02 : mt::kPeakSeconds);
  const std::vector<Way> ways = ways_of(precision);
  std::printf(
      "%s %s: GEMM peak %.1f GFLOP/s (%s, %d^3); ms per call (median of %d), GFLOP/s, %% "
      "of the peak\n",
      set.c_str(), precision.c_str(), peak.gflops, peak.kernel.c_str(), peak.n, o.rounds);
  const char* names[3] = {"fwd", "bwd_input", "bwd_weight"};
  std::vector<double> total(ways.size(), 0.0);
  double flops_total = 0;
  for (const Layer& l : layers_of(set, o.vocab)) {
    Products p(l);
    const auto products = p.of(precision);
    const double flops = 2.0 * l.N * l.C * l.OC;
    for (int k = 0; k < 3; ++k) {
      std::vector<std::vector<double>> ms(ways.size());
      for (int r = 0; r < o.rounds; ++r)
        for (size_t i = 0; i < ways.size(); ++i) {
          const Way& way = ways[(i + r) % ways.size()];
          double s = 0;
          way.under([&] {
            products[k]();  // warm-up: primitive creation, caches
            s = mt::bench::batch_seconds(products[k], o.quick ? 0.002 : 0.03, o.cpu, o.threads);
          });
          ms[(i + r) % ways.size()].push_back(s * 1e3);
        }
      const int mnk[3][3] = {{l.N, l.OC, l.C}, {l.N, l.C, l.OC}, {l.OC, l.C, l.N}};
      std::printf("  %-9s %-10s M %5d N %5d K %5d |", l.name.c_str(), names[k], mnk[k][0],
                  mnk[k][1], mnk[k][2]);
      for (size_t i = 0; i < ways.size(); ++i) {
        const double m = mt::bench::median(ms[i]), gf = flops / m * 1e-6;
        total[i] += m;
        std::printf(" %s %7.3f ms %5.0f %3.0f%% |", ways[i].name.c_str(), m, gf,
                    100 * gf / peak.gflops);
      }
      std::printf("\n");
      flops_total += flops;
    }
  }
  std::printf("  all         products of one layer each |");
  for (size_t i = 0; i < ways.size(); ++i)
    std::printf(" %s %7.3f ms %5.0f %3.0f%% |", ways[i].name.c_str(), total[i],
                flops_total / total[i] * 1e-6, 100 * flops_total / total[i] * 1e-6 / peak.gflops);
  std::printf("\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc;
    if (a == "--quick") {
      o.quick = true, o.rounds = 1;
    } else if (a == "--cpu") {
      o.cpu = true;
    } else if (a == "--rounds" && value) {
      o.rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--threads" && value) {
      o.threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--vocab" && value) {
      o.vocab = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--shapes" && value) {
      o.shapes = mt::bench::parse_names(argv[++i]);
    } else if (a == "--precision" && value) {
      o.precisions = mt::bench::parse_names(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: bench_linear_gemms [--quick] [--rounds N] [--threads T] [--cpu] "
                   "[--shapes d128,d256,d512] [--precision fp32,bf16] [--vocab V]\n");
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  omp_set_num_threads(o.threads);
  std::printf("linear GEMMs of one step, %d thread(s), %s time, load average %.2f\n", o.threads,
              o.cpu ? "CPU" : "wall", mt::bench::load_average());
  for (const std::string& set : o.shapes)
    for (const std::string& precision : o.precisions) {
      if (precision == "bf16" && !mt::bf16_matmul_supported()) continue;
      run_table(set, precision, o);
    }
  return 0;
}
