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

void bench_model(int C, double peak, bool quick) {
  const int B = 8, T = 128, V = 256, NH = C / 64, N = B * T, L = 4;
  std::printf("dim %d (B=%d T=%d NH=%d V=%d, N=%d rows)\n", C, B, T, NH, V, N);
  auto inp = filled(size_t(N) * 4 * C, 1.0f), out = filled(size_t(N) * 4 * C, 1.0f);
  auto grad = filled(size_t(N) * 4 * C, 1.0f), dinp = filled(size_t(N) * 4 * C, 1.0f);
  auto weight = filled(size_t(4) * C * C, 0.02f), dweight = filled(size_t(4) * C * C, 0.0f);
  auto bias = filled(4 * C, 0.0f), dbias = filled(4 * C, 0.0f);

  struct Linear {
    const char* name;
    int in, out;
  };
  const Linear linears[] = {{"qkv", C, 3 * C},
                            {"attn_proj", C, C},
                            {"fc", C, 4 * C},
                            {"mlp_proj", 4 * C, C},
                            {"lm_head", C, V}};
  for (const Linear& l : linears) {
    double flops = 2.0 * N * l.in * l.out;
    std::string n = l.name;
    report((n + " fwd").c_str(),
           time_call(
               [&] {
                 mt::matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, l.in,
                                    l.out);
               },
               quick),
           flops, 0, peak);
    report((n + " bwd_input").c_str(),
           time_call(
               [&] {
                 mt::matmul_backward_input(dinp.data(), grad.data(), weight.data(), N, l.in, l.out);
               },
               quick),
           flops, 0, peak);
    report((n + " bwd_weight").c_str(),
           time_call(
               [&] {
                 mt::matmul_backward_weight(dweight.data(), dbias.data(), grad.data(), inp.data(),
                                            N, l.in, l.out);
               },
               quick),
           flops, 0, peak);
  }

  // Attention: count the useful (causal) FLOPs, q k^T and att v over the lower triangle.
  auto qkv = filled(size_t(N) * 3 * C, 1.0f), dqkv = filled(size_t(N) * 3 * C, 0.0f);
  auto att = filled(size_t(B) * NH * T * T, 0.0f);
  std::vector<float> scratch(mt::attention_backward_scratch_floats(B, T, C, NH));
  double att_flops = 2.0 * B * T * T * C;  // 2 GEMMs * 2 flops * T*T/2 * hd * NH
  report("attention fwd",
         time_call([&] { mt::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH); },
                   quick),
         att_flops, 0, peak);
  report("attention bwd",
         time_call(
             [&] {
               mt::attention_backward(dqkv.data(), scratch.data(), grad.data(), qkv.data(),
                                      att.data(), B, T, C, NH);
             },
             quick),
         2 * att_flops, 0, peak);

  std::vector<float> mean(N), rstd(N);
  double ln_bytes = 2.0 * N * C * 4;
  report("layernorm fwd",
         time_call(
             [&] {
               mt::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(),
                                     weight.data(), bias.data(), N, C);
             },
             quick),
         0, ln_bytes, peak);
  report("layernorm bwd_input",
         time_call(
             [&] {
               mt::layernorm_backward_input(dinp.data(), grad.data(), inp.data(), weight.data(),
                                            mean.data(), rstd.data(), N, C);
             },
             quick),
         0, 4.0 * N * C * 4, peak);
  report("layernorm bwd_weight",
         time_call(
             [&] {
               mt::layernorm_backward_weight(dweight.data(), dbias.data(), grad.data(), inp.data(),
                                             mean.data(), rstd.data(), N, C);
             },
             quick),
         0, 2.0 * N * C * 4, peak);

  size_t nh = size_t(N) * 4 * C;
  report("gelu fwd (N x 4C)",
         time_call([&] { mt::gelu_forward(out.data(), inp.data(), nh); }, quick), 0, 2.0 * nh * 4,
         peak);
  report("bias_gelu fwd (N x 4C)",
         time_call([&] { mt::bias_gelu_forward(out.data(), dinp.data(), bias.data(), N, 4 * C); },
                   quick),
         0, 3.0 * nh * 4, peak);
  report("gelu bwd (N x 4C)",
         time_call([&] { mt::gelu_backward(dinp.data(), inp.data(), grad.data(), nh); }, quick), 0,
         4.0 * nh * 4, peak);

  auto logits = filled(size_t(N) * V, 4.0f);
  std::vector<int> targets(N);
  for (int n = 0; n < N; n++) targets[n] = (n * 7) % V;
  std::vector<float> losses(N);
  report("crossentropy fwd+bwd",
         time_call(
             [&] {
               mt::crossentropy_forward_backward(losses.data(), logits.data(), targets.data(),
                                                 1.0f / N, N, V, V);
             },
             quick),
         0, 2.0 * N * V * 4, peak);

  auto wte = filled(size_t(V) * C, 0.02f), wpe = filled(size_t(T) * C, 0.02f);
  report("embedding fwd",
         time_call(
             [&] {
               mt::embedding_forward(out.data(), targets.data(), wte.data(), wpe.data(), B, T, C, 0,
                                     V);
             },
             quick),
         0, 2.0 * N * C * 4, peak);
  report("embedding bwd",
         time_call(
             [&] {
               mt::embedding_backward(wte.data(), wpe.data(), grad.data(), targets.data(), B, T, C,
                                      0, V);
             },
             quick),
         0, 3.0 * N * C * 4, peak);

  size_t nparams = size_t(12) * C * C * L + size_t(V + T) * C;
  auto p = filled(nparams, 0.02f), g = filled(nparams, 0.01f), m = filled(nparams, 0.0f),
       v = filled(nparams, 0.0f);
  mt::AdamWParams hp{3e-4, 0.9, 0.95, 1e-8, 0.1, 1};
  char label[64];
  std::snprintf(label, sizeof label, "adamw (%zu M params)", nparams >> 20);
  report(label,
         time_call([&] { mt::adamw_update(p.data(), g.data(), m.data(), v.data(), nparams, hp); },
                   quick),
         0, 7.0 * nparams * 4, peak);
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
