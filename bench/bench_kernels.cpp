// Per-kernel time and throughput at the shapes of the target models (GPT, dim 256 / 512,
// seq 128, batch 8, vocab 256, head dim 64), at 1 and 2 OpenMP threads, next to the
// measured sgemm peak. GEMM-bound kernels report GFLOP/s (and % of peak), the others GB/s
// of compulsory memory traffic.
//
//   bench_kernels [--quick] [--threads 1,2] [--dims 256,512]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/timer.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gemm_peak.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace {

struct Options {
  bool quick = false;
  std::vector<int> threads = {1, 2};
  std::vector<int> dims = {256, 512};
};

using mt::bench::parse_list;

using mt::bench::filled;

// Median seconds per call over 5 batches, each long enough to be timed reliably.
double time_call(const std::function<void()>& fn, bool quick) {
  return mt::bench::median_batch_seconds(fn, quick ? 0.002 : 0.05, quick ? 1 : 5);
}

void report(const char* name, double sec, double flops, double bytes, double peak) {
  if (flops > 0)
    std::printf("  %-28s %9.3f ms %8.1f GFLOP/s %5.0f%% of peak\n", name, sec * 1e3,
                flops / sec * 1e-9, 100.0 * flops / sec * 1e-9 / peak);
  else
    std::printf("  %-28s %9.3f ms %8.1f GB/s\n", name, sec * 1e3, bytes / sec * 1e-9);
}

// The model's shapes at dim C, and the buffers the kernels share (sized for the largest
// of them, N x 4C activations and 4 C x C weights).
struct Model {
  int C, B = 8, T = 128, V = 256, NH, N, L = 4;
  double peak;
  bool quick;
  std::vector<float> inp, out, grad, dinp, weight, dweight, bias, dbias;
  Model(int dim, double peak_gflops, bool quick_run)
      : C(dim), NH(dim / 64), N(B * T), peak(peak_gflops), quick(quick_run) {
    inp = filled(size_t(N) * 4 * C, 1.0f), out = filled(size_t(N) * 4 * C, 1.0f);
    grad = filled(size_t(N) * 4 * C, 1.0f), dinp = filled(size_t(N) * 4 * C, 1.0f);
    weight = filled(size_t(4) * C * C, 0.02f), dweight = filled(size_t(4) * C * C, 0.0f);
    bias = filled(4 * C, 0.0f), dbias = filled(4 * C, 0.0f);
  }
  void row(const char* name, const std::function<void()>& fn, double flops, double bytes) const {
    report(name, time_call(fn, quick), flops, bytes, peak);
  }
};

// The block's and the head's linears, each forward, backward input and backward weight.
void linear_rows(Model& m) {
  struct Linear {
    const char* name;
    int in, out;
  };
  const int C = m.C, N = m.N;
  const Linear linears[] = {{"qkv", C, 3 * C},
                            {"attn_proj", C, C},
                            {"fc", C, 4 * C},
                            {"mlp_proj", 4 * C, C},
                            {"lm_head", C, m.V}};
  for (const Linear& l : linears) {
    const double flops = 2.0 * N * l.in * l.out;
    const std::string n = l.name;
    m.row((n + " fwd").c_str(),
          [&] {
            mt::matmul_forward(m.out.data(), m.inp.data(), m.weight.data(), m.bias.data(), N, l.in,
                               l.out);
          },
          flops, 0);
    m.row((n + " bwd_input").c_str(),
          [&] {
            mt::matmul_backward_input(m.dinp.data(), m.grad.data(), m.weight.data(), N, l.in,
                                      l.out);
          },
          flops, 0);
    m.row((n + " bwd_weight").c_str(),
          [&] {
            mt::matmul_backward_weight(m.dweight.data(), m.dbias.data(), m.grad.data(),
                                       m.inp.data(), N, l.in, l.out);
          },
          flops, 0);
  }
}

// Attention: count the useful (causal) FLOPs, q k^T and att v over the lower triangle.
void attention_rows(Model& m) {
  const int B = m.B, T = m.T, C = m.C, NH = m.NH;
  auto qkv = filled(size_t(m.N) * 3 * C, 1.0f), dqkv = filled(size_t(m.N) * 3 * C, 0.0f);
  auto att = filled(size_t(B) * NH * T * T, 0.0f);
  std::vector<float> scratch(mt::attention_backward_scratch_floats(B, T, C, NH));
  const double att_flops = 2.0 * B * T * T * C;  // 2 GEMMs * 2 flops * T*T/2 * hd * NH
  m.row(
      "attention fwd",
      [&] { mt::attention_forward(m.out.data(), att.data(), qkv.data(), B, T, C, NH); }, att_flops,
      0);
  m.row(
      "attention bwd",
      [&] {
        mt::attention_backward(dqkv.data(), scratch.data(), m.grad.data(), qkv.data(), att.data(),
                               B, T, C, NH);
      },
      2 * att_flops, 0);
}

void layernorm_rows(Model& m) {
  const int N = m.N, C = m.C;
  std::vector<float> mean(N), rstd(N);
  m.row(
      "layernorm fwd",
      [&] {
        mt::layernorm_forward(m.out.data(), mean.data(), rstd.data(), m.inp.data(), m.weight.data(),
                              m.bias.data(), N, C);
      },
      0, 2.0 * N * C * 4);
  m.row(
      "layernorm bwd_input",
      [&] {
        mt::layernorm_backward_input(m.dinp.data(), m.grad.data(), m.inp.data(), m.weight.data(),
                                     mean.data(), rstd.data(), N, C);
      },
      0, 4.0 * N * C * 4);
  m.row(
      "layernorm bwd_weight",
      [&] {
        mt::layernorm_backward_weight(m.dweight.data(), m.dbias.data(), m.grad.data(), m.inp.data(),
                                      mean.data(), rstd.data(), N, C);
      },
      0, 2.0 * N * C * 4);
}

void gelu_rows(Model& m) {
  const size_t nh = size_t(m.N) * 4 * m.C;
  m.row(
      "gelu fwd (N x 4C)", [&] { mt::gelu_forward(m.out.data(), m.inp.data(), nh); }, 0,
      2.0 * nh * 4);
  m.row(
      "bias_gelu fwd (N x 4C)",
      [&] { mt::bias_gelu_forward(m.out.data(), m.dinp.data(), m.bias.data(), m.N, 4 * m.C); }, 0,
      3.0 * nh * 4);
  m.row(
      "gelu bwd (N x 4C)",
      [&] { mt::gelu_backward(m.dinp.data(), m.inp.data(), m.grad.data(), nh); }, 0, 4.0 * nh * 4);
}

// The kernels that read token ids: the loss and the embedding.
void token_rows(Model& m) {
  const int B = m.B, T = m.T, C = m.C, V = m.V, N = m.N;
  auto logits = filled(size_t(N) * V, 4.0f);
  std::vector<int> targets(N);
  for (int n = 0; n < N; n++) targets[n] = (n * 7) % V;
  std::vector<float> losses(N);
  m.row(
      "crossentropy fwd+bwd",
      [&] {
        mt::crossentropy_forward_backward(losses.data(), logits.data(), targets.data(), 1.0f / N, N,
                                          V, V);
      },
      0, 2.0 * N * V * 4);
  auto wte = filled(size_t(V) * C, 0.02f), wpe = filled(size_t(T) * C, 0.02f);
  m.row(
      "embedding fwd",
      [&] {
        mt::embedding_forward(m.out.data(), targets.data(), wte.data(), wpe.data(), B, T, C, 0, V);
      },
      0, 2.0 * N * C * 4);
  m.row(
      "embedding bwd",
      [&] {
        mt::embedding_backward(wte.data(), wpe.data(), m.grad.data(), targets.data(), B, T, C, 0,
                               V);
      },
      0, 3.0 * N * C * 4);
}

// The optimizer over the whole model's parameters.
void adamw_row(Model& m) {
  const size_t nparams = size_t(12) * m.C * m.C * m.L + size_t(m.V + m.T) * m.C;
  auto p = filled(nparams, 0.02f), g = filled(nparams, 0.01f), mom = filled(nparams, 0.0f),
       v = filled(nparams, 0.0f);
  mt::AdamWParams hp{3e-4, 0.9, 0.95, 1e-8, 0.1, 1};
  char label[64];
  std::snprintf(label, sizeof label, "adamw (%zu M params)", nparams >> 20);
  m.row(
      label, [&] { mt::adamw_update(p.data(), g.data(), mom.data(), v.data(), nparams, hp); }, 0,
      7.0 * nparams * 4);
}

void bench_model(int C, double peak, bool quick) {
  Model m(C, peak, quick);
  std::printf("dim %d (B=%d T=%d NH=%d V=%d, N=%d rows)\n", C, m.B, m.T, m.NH, m.V, m.N);
  linear_rows(m);
  attention_rows(m);
  layernorm_rows(m);
  gelu_rows(m);
  token_rows(m);
  adamw_row(m);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--quick"))
      opt.quick = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      opt.threads = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--dims") && i + 1 < argc)
      opt.dims = parse_list(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_kernels [--quick] [--threads 1,2] [--dims 256,512]\n");
      return 2;
    }
  }
  for (int threads : opt.threads) {
    omp_set_num_threads(threads);
    double peak = mt::measure_sgemm_peak_gflops(threads, opt.quick ? 0.05 : 1.0);
    std::printf("== %d thread%s: sgemm peak %.1f GFLOP/s\n", threads, threads > 1 ? "s" : "", peak);
    for (int C : opt.dims) bench_model(C, peak, opt.quick);
  }
  return 0;
}
