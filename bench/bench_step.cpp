// One worker's whole training step, in-process: the trainer's train_step on a one-worker
// session (load the batch, forward + backward, gradient norm, clipping, AdamW),
// for the model configs at 1 and 2 threads. Reports the median time of each phase
// (and the fastest step), tokens/s and MFU as the trainer computes it (model FLOPs/s over the
// 1-thread sgemm peak times the thread count, measured in the same run).
//
// The per-kernel table re-issues one block's kernel calls (and the embedding, head and
// optimizer calls) with the model's shapes on separate buffers, timing each call, so the
// step time can be attributed; "sum" next to the measured step shows what it covers.
//
// --precision fp32,bf16 runs each precision in turn, --rounds R times over (alternating, so a
// change of load hits both alike), MFU of bf16 against the bf16 GEMM peak measured in the
// same run, and ends with the bf16/fp32 tokens/s ratio per config and thread count (median
// of the rounds). With bf16 the kernel table shows the bf16 GEMMs, attention and GELU.
//
// --interleave (with two precisions): both sessions in one process, their steps alternating,
// steps x rounds pairs; reports the median of the per-pair step-time ratios.
//
// A precision may name the bf16 GEMM routine (kernels/matmul_bf16.h): bf16@primitive or
// bf16@jit_gemm; plain bf16 takes this CPU's default. --precision bf16@primitive,bf16@jit_gemm
// --interleave compares the two routines in one run.
//
//   bench_step [--quick] [--threads 1,2] [--configs a,b] [--steps 10] [--no-kernels] [--cpu]
//              [--precision fp32,bf16] [--rounds 1] [--interleave]
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/token_shard.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/gemm_peak.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/reduce.h"
#include "model/gpt.h"
#include "train/session.h"
#include "train/step.h"

namespace {

struct BenchConfig {
  char name;
  int layers, dim, heads, seq, batch, vocab;
};
const BenchConfig kConfigs[] = {{'a', 4, 256, 8, 128, 8, 256}, {'b', 6, 512, 8, 128, 8, 256}};

struct Options {
  bool quick = false, kernels = true, cpu = false;
  int steps = 10;
  std::vector<int> threads = {1, 2};
  std::string configs = "ab";
  std::vector<std::string> precisions = {"fp32"};
  int rounds = 1;
  bool interleave = false;
};

using mt::bench::parse_list;

// "bf16@jit_gemm" -> the precision ("bf16") and the GEMM routine it forces, if any.
struct PrecisionSpec {
  std::string precision;
  std::optional<mt::Bf16GemmPath> path;
};

std::optional<PrecisionSpec> parse_precision(const std::string& spec) {
  const size_t at = spec.find('@');
  PrecisionSpec p{spec.substr(0, at), std::nullopt};
  if (p.precision != "fp32" && p.precision != "bf16") return std::nullopt;
  if (at == std::string::npos) return p;
  const std::string path = spec.substr(at + 1);
  if (p.precision != "bf16" || (path != "primitive" && path != "jit_gemm")) return std::nullopt;
  p.path = path == "primitive" ? mt::Bf16GemmPath::primitive : mt::Bf16GemmPath::jit_gemm;
  if (!mt::matmul_bf16_path_available(*p.path)) return std::nullopt;
  return p;
}

// The precision of a spec main() has validated ("bf16@primitive" -> "bf16").
std::string precision_of(const std::string& spec) {
  return parse_precision(spec)->precision;
}

// The routine a precision spec forces, for as long as this lives.
struct UsePath {
  explicit UsePath(const std::string& spec) {
    if (const auto p = parse_precision(spec); p && p->path) use.emplace(*p->path);
  }
  std::optional<mt::ScopedBf16GemmPath> use;
};

using mt::bench::filled;

// Wall time, or (--cpu) this process's CPU time divided by the thread count: on a loaded
// machine the latter leaves out the time slices other processes took (at 2 threads it also
// counts OpenMP barrier spinning, so it is only a rough guide there).
struct Clock {
  bool cpu = false;
  int threads = 1;
  double now() const {
    if (!cpu) return mt::now_seconds();
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)) / threads;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Fastest of 5 short batches, seconds per call (1 batch in --quick mode): the least
// disturbed by other processes on a shared machine.
double time_call(const std::function<void()>& fn, bool quick, const Clock& clock) {
  fn();  // warm-up: page faults, oneDNN kernel generation
  std::vector<double> per_call;
  for (int b = 0; b < (quick ? 1 : 5); b++) {
    const double start = clock.now();
    int calls = 0;
    do {
      fn();
      calls++;
    } while (clock.now() - start < (quick ? 0.001 : 0.02));
    per_call.push_back((clock.now() - start) / calls);
  }
  return *std::min_element(per_call.begin(), per_call.end());
}

struct Phases {
  double fb = 0, grads = 0, norm = 0, optim = 0, total = 0, best = 0;
};

mt::ModelConfig model_config(const BenchConfig& bc) {
  mt::ModelConfig cfg;
  cfg.layers = bc.layers, cfg.dim = bc.dim, cfg.heads = bc.heads;
  cfg.seq = bc.seq, cfg.vocab = bc.vocab;
  return cfg;
}

// A token shard the session reads (the step loads its batch from it, as in training).
std::string write_bench_shard(const BenchConfig& bc) {
  char tmpl[] = "/tmp/meshtrain-bench-step-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<int> tokens(size_t(bc.batch) * bc.seq * 4 + 1);
  for (size_t n = 0; n < tokens.size(); n++) tokens[n] = int((n * 37 + 11) % size_t(bc.vocab));
  mt::write_token_shard(dir + "/train.bin", tokens);
  return dir;
}

// One worker's options for `steps` measured steps after 2 warm-up steps, on the bench shard
// in `dir`.
mt::TrainOptions bench_options(const BenchConfig& bc, const std::string& dir, int steps,
                               int threads, const std::string& precision) {
  mt::TrainOptions o;
  o.model = model_config(bc);
  o.io.data = dir + "/train.bin";
  o.optim.batch = bc.batch;
  o.optim.steps = steps + 2;
  o.optim.lr = 1e-4;
  o.optim.threads = threads;
  o.optim.seed = 1234;
  MT_REQUIRE(mt::parse_precision(precision, &o.optim.precision), "precision ", precision);
  return o;
}

// The trainer's own step (train_step) on a one-worker session: load the batch, forward +
// backward, gradient norm, clipping, AdamW and its finite check. Phase times are the
// step's own (wall clock); the total is on the bench clock.
Phases time_steps(const BenchConfig& bc, int steps, const Clock& clock, int threads,
                  const std::string& precision) {
  const std::string dir = write_bench_shard(bc);
  const mt::TrainOptions o = bench_options(bc, dir, steps, threads, precision);
  std::vector<double> fb, grads, norm, optim, total;
  mt::run_local(1, mt::WorldOptions{}, [&](mt::CommWorld& w) {
    std::unique_ptr<mt::Session> s = mt::build_session(o, w, mt::RunInfo{});
    mt::Trace trace(false, 0, 0);
    for (int step = 1; step <= o.optim.steps; step++) {
      const double start = clock.now();
      const mt::StepRecord r = mt::train_step(*s, step, trace);
      const double t = clock.now() - start;
      if (step <= 2) continue;
      fb.push_back(r.phases.forward_backward), grads.push_back(r.phases.gradients);
      norm.push_back(r.phases.norm_and_clip), optim.push_back(r.phases.optimizer);
      total.push_back(t);
    }
  });
  std::filesystem::remove_all(dir);
  return {median(fb),    median(grads), median(norm),
          median(optim), median(total), *std::min_element(total.begin(), total.end())};
}

struct KernelCall {
  std::string name;
  int count;     // calls per step
  double flops;  // per call; 0 for memory-bound kernels
  std::function<void()> fn;
};

// One block's kernel calls (as block.cpp issues them), plus the embedding, head and
// optimizer, with their per-step multiplicity. Buffers are separate from the model's.
struct KernelBench {
  // bf16: the linear layers' GEMMs as --precision bf16 runs them (bf16 operands, and the
  // conversions the layers add), the rest as in fp32.
  KernelBench(const BenchConfig& bc, bool bf16) : bc_(bc), bf16_(bf16) {
    const int C = bc.dim, H = 4 * C, N = bc.batch * bc.seq, V = bc.vocab;
    const size_t big = size_t(N) * std::max(H, V);
    x = filled(big, 1.0f, 1), y = filled(big, 1.0f, 2), dy = filled(big, 0.1f, 3);
    dx = filled(big, 0.0f, 4), qkv = filled(size_t(N) * 3 * C, 1.0f, 5);
    dqkv = filled(size_t(N) * 3 * C, 0.0f, 6);
    w = filled(size_t(H) * std::max(C, V), 0.02f, 7), dw = filled(w.size(), 0.0f, 8);
    bias = filled(size_t(H), 0.02f, 9), dbias = filled(size_t(H), 0.0f, 10);
    att = filled(size_t(bc.batch) * bc.heads * bc.seq * bc.seq, 0.0f, 11);
    scratch.resize(mt::attention_backward_scratch_floats(bc.batch, bc.seq, C, bc.heads));
    wpe = filled(size_t(bc.seq) * C, 0.02f, 15), dwpe = filled(wpe.size(), 0.0f, 16);
    zeroed.resize(size_t(N) * (H + 5 * C));
    mean.resize(N), rstd.resize(N), losses.resize(N), idx.resize(N);
    for (int n = 0; n < N; n++) idx[n] = (n * 7) % V;
    logits = filled(size_t(N) * V, 4.0f, 12);
    P = mt::GPT(model_config(bc), mt::GPT::whole_model(model_config(bc)), mt::TensorParallelShard{},
                1)
            .table()
            .total();
    p = filled(P, 0.02f, 13), g = filled(P, 0.001f, 14), m.assign(P, 0.0f), v.assign(P, 0.0f);
    x16.resize(big), dy16.resize(big), w16.resize(w.size());
    mt::to_bf16(x16.data(), x.data(), big), mt::to_bf16(dy16.data(), dy.data(), big);
    mt::to_bf16(w16.data(), w.data(), w.size());
    // The attention forward fills att with valid probabilities for the backward.
    mt::attention_forward(y.data(), att.data(), qkv.data(), bc.batch, bc.seq, C, bc.heads);
  }

  std::vector<KernelCall> calls() {
    const int C = bc_.dim, H = 4 * C, N = bc_.batch * bc_.seq, V = bc_.vocab, L = bc_.layers;
    const int B = bc_.batch, T = bc_.seq, NH = bc_.heads;
    const double Nd = N;
    auto mm = [&](const char* name, int in, int out, bool b) -> std::vector<KernelCall> {
      const double f = 2.0 * Nd * in * out;
      std::string n = name;
      if (bf16_)
        return {{n + " fwd bf16", L, f,
                 [=, this] {
                   mt::matmul_bf16_forward(y.data(), x16.data(), w16.data(),
                                           b ? bias.data() : nullptr, N, in, out);
                 }},
                {n + " bwd_input bf16", L, f,
                 [=, this] {
                   mt::matmul_bf16_backward_input(dx.data(), dy16.data(), w16.data(), N, in, out,
                                                  false);
                 }},
                {n + " bwd_weight bf16", L, f, [=, this] {
                   mt::matmul_bf16_backward_weight(dw.data(), dbias.data(), dy16.data(), x16.data(),
                                                   N, in, out);
                 }}};
      return {
          {n + " fwd", L, f,
           [=, this] {
             mt::matmul_forward(y.data(), x.data(), w.data(), b ? bias.data() : nullptr, N, in,
                                out);
           }},
          {n + " bwd_input", L, f,
           [=, this] { mt::matmul_backward_input(dx.data(), dy.data(), w.data(), N, in, out); }},
          {n + " bwd_weight", L, f, [=, this] {
             mt::matmul_backward_weight(dw.data(), dbias.data(), dy.data(), x.data(), N, in, out);
           }}};
    };
    std::vector<KernelCall> out;
    for (auto& v : {mm("qkv", C, 3 * C, true), mm("attn_proj", C, C, true), mm("fc", C, H, false),
                    mm("mlp_proj", H, C, true)})
      out.insert(out.end(), v.begin(), v.end());
    // Full (non-causal) attention FLOPs, as MFU counts them: 4 T^2 C forward, 8 T^2 C backward.
    const double af = 4.0 * B * double(T) * T * C;
    if (bf16_) {  // the bf16 products (kernels/attention.h), as --precision bf16 runs them
      out.push_back({"attention fwd bf16", L, af, [=, this] {
                       mt::attention_forward_bf16(y.data(), att.data(), qkv.data(), B, T, C, NH);
                     }});
      out.push_back({"attention bwd bf16", L, 2 * af, [=, this] {
                       mt::attention_backward_bf16(dqkv.data(), scratch.data(), dy.data(),
                                                   qkv.data(), att.data(), B, T, C, NH);
                     }});
    } else {
      out.push_back({"attention fwd", L, af, [=, this] {
                       mt::attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH);
                     }});
      out.push_back({"attention bwd", L, 2 * af, [=, this] {
                       mt::attention_backward(dqkv.data(), scratch.data(), dy.data(), qkv.data(),
                                              att.data(), B, T, C, NH);
                     }});
    }
    out.push_back({"layernorm fwd", 2 * L + 1, 0, [=, this] {
                     mt::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                           bias.data(), N, C);
                   }});
    out.push_back({"layernorm bwd_input", 2 * L + 1, 0, [=, this] {
                     mt::layernorm_backward_input(dx.data(), dy.data(), x.data(), w.data(),
                                                  mean.data(), rstd.data(), N, C);
                   }});
    out.push_back({"layernorm bwd_weight", 2 * L + 1, 0, [=, this] {
                     mt::layernorm_backward_weight(dw.data(), dbias.data(), dy.data(), x.data(),
                                                   mean.data(), rstd.data(), N, C);
                   }});
    if (bf16_) {  // the GELU kernels write the bf16 GEMM inputs themselves
      out.push_back({"bias_gelu fwd bf16", L, 0, [=, this] {
                       mt::bias_gelu_forward_bf16(x16.data(), dx.data(), bias.data(), N, H);
                     }});
      out.push_back({"gelu bwd bf16", L, 0, [=, this] {
                       mt::gelu_backward_bf16(dy16.data(), x.data(), dy.data(), size_t(N) * H);
                     }});
    } else {
      out.push_back({"bias_gelu fwd", L, 0,
                     [=, this] { mt::bias_gelu_forward(y.data(), dx.data(), bias.data(), N, H); }});
      out.push_back({"gelu bwd", L, 0, [=, this] {
                       mt::gelu_backward(dx.data(), x.data(), dy.data(), size_t(N) * H);
                     }});
    }
    out.push_back({"residual add", 2 * L, 0,
                   [=, this] { mt::add_inplace(y.data(), x.data(), size_t(N) * C); }});
    // block.cpp's backward zeroes d_fc, d_ln2, d_att_out, d_qkv, d_ln1 and copies the
    // residual gradient twice; the head zeroes two (N, C) buffers.
    out.push_back({"memset/memcpy (block bwd)", L, 0, [=, this] {
                     std::memset(zeroed.data(), 0, zeroed.size() * sizeof(float));
                     std::memcpy(y.data(), x.data(), size_t(N) * 2 * C * sizeof(float));
                   }});
    if (bf16_) {
      // Per block to_bf16 rounds the two row-parallel output gradients (N C each) twice, for
      // B and for W; every other bf16 GEMM input is rounded by the kernel that makes it
      // (LayerNorm, attention, GELU above). And one weight conversion per step of each
      // matrix (12 C^2 per block).
      const size_t nc = size_t(N) * C;
      out.push_back({"bf16 conversions (block)", L, 0, [=, this] {
                       for (int k = 0; k < 4; ++k) mt::to_bf16(x16.data(), y.data(), nc);
                     }});
      out.push_back({"bf16 weight copies (4 C^2)", 3 * L, 0,
                     [=, this] { mt::to_bf16(w16.data(), w.data(), size_t(4) * C * C); }});
    }
    out.push_back({"lm_head fwd", 1, 2.0 * Nd * C * V, [=, this] {
                     mt::matmul_forward(logits.data(), x.data(), w.data(), nullptr, N, C, V);
                   }});
    out.push_back({"lm_head bwd_input", 1, 2.0 * Nd * C * V, [=, this] {
                     mt::matmul_backward_input(dx.data(), logits.data(), w.data(), N, C, V);
                   }});
    out.push_back({"lm_head bwd_weight", 1, 2.0 * Nd * C * V, [=, this] {
                     mt::matmul_backward_weight(dw.data(), nullptr, logits.data(), x.data(), N, C,
                                                V);
                   }});
    out.push_back({"crossentropy fwd+bwd", 1, 0, [=, this] {
                     mt::crossentropy_forward_backward(losses.data(), logits.data(), idx.data(),
                                                       1.0f / N, N, V, V);
                   }});
    out.push_back({"embedding fwd", 1, 0, [=, this] {
                     mt::embedding_forward(y.data(), idx.data(), w.data(), wpe.data(), B, T, C, 0,
                                           V);
                   }});
    out.push_back({"embedding bwd", 1, 0, [=, this] {
                     mt::embedding_backward(dw.data(), dwpe.data(), dy.data(), idx.data(), B, T, C,
                                            0, V);
                   }});
    out.push_back({"zero grads", 1, 0, [=, this] { std::memset(g.data(), 0, P * sizeof(float)); }});
    out.push_back({"grad norm", 1, 0, [=, this] { (void)mt::sum_squares(g.data(), P); }});
    out.push_back({"adamw", 1, 0, [=, this] {
                     mt::adamw_update(p.data(), g.data(), m.data(), v.data(), P,
                                      mt::AdamWParams{1e-4, 0.9, 0.95, 1e-8, 0.1, 1});
                   }});
    return out;
  }

  BenchConfig bc_;
  bool bf16_ = false;
  std::vector<mt::bf16> x16, dy16, w16;
  std::vector<float> x, y, dy, dx, qkv, dqkv, w, dw, bias, dbias, att, scratch, mean, rstd, losses,
      logits, p, g, m, v, wpe, dwpe, zeroed;
  std::vector<int> idx;
  size_t P = 0;
};

// measure_sgemm_peak_gflops's GEMMs (1024^3 and 2048^3 through mt::sgemm, best of several)
// timed by CPU time, for --cpu runs.
double cpu_time_peak(bool quick) {
  mt::set_compute_threads(1);
  const Clock clock{true, 1};
  double best = 0;
  for (int n : {1024, 2048}) {
    std::vector<float> a = filled(size_t(n) * n, 1.0f, 1), b = filled(size_t(n) * n, 1.0f, 2);
    std::vector<float> c(size_t(n) * n);
    for (int rep = 0; rep < (quick ? 1 : n == 1024 ? 8 : 3); rep++) {
      const double t0 = clock.now();
      mt::sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      best = std::max(best, 2.0 * n * n * double(n) / (clock.now() - t0) * 1e-9);
    }
  }
  return best;
}

// --interleave: one session per precision in one process, their steps alternating (the
// order flipped every pair), so that a drift of the host's speed, which moves a whole
// 10-second run by up to ~15% here, lands on both precisions of a pair alike. Returns the
// per-pair ratios t(first precision) / t(second), after 2 warm-up steps of each.
std::vector<double> interleaved_ratios(const BenchConfig& bc, int pairs, const Clock& clock,
                                       int threads, const std::vector<std::string>& precisions,
                                       std::vector<std::vector<double>>& times) {
  mt::set_compute_threads(threads);
  std::vector<std::string> dirs;
  std::vector<mt::TrainOptions> opts;
  for (const std::string& precision : precisions) {
    dirs.push_back(write_bench_shard(bc));
    opts.push_back(bench_options(bc, dirs.back(), pairs, threads, precision_of(precision)));
  }
  std::vector<double> ratios;
  times.assign(precisions.size(), {});
  mt::run_local(1, mt::WorldOptions{}, [&](mt::CommWorld& w) {
    std::vector<std::unique_ptr<mt::Session>> sessions;
    for (const mt::TrainOptions& o : opts)
      sessions.push_back(mt::build_session(o, w, mt::RunInfo{}));
    mt::Trace trace(false, 0, 0);
    for (int step = 1; step <= pairs + 2; step++) {
      double t[2] = {0, 0};
      for (int k = 0; k < 2; k++) {
        const int p = (step % 2 == 0) ? k : 1 - k;
        const UsePath use(precisions[size_t(p)]);
        const double start = clock.now();
        mt::train_step(*sessions[p], step, trace);
        t[p] = clock.now() - start;
      }
      if (step <= 2) continue;
      times[0].push_back(t[0]), times[1].push_back(t[1]);
      ratios.push_back(t[0] / t[1]);
    }
  });
  for (const std::string& d : dirs) std::filesystem::remove_all(d);
  return ratios;
}

// Returns the tokens/s of the median step.
double bench_config(const BenchConfig& bc, int threads, double peak1, const Options& opt,
                    const std::string& precision) {
  mt::set_compute_threads(threads);
  const mt::ModelConfig cfg = model_config(bc);
  const double peak = peak1 * threads;  // the trainer's MFU denominator (GFLOP/s)
  const double tokens = double(bc.batch) * bc.seq;
  const Clock clock{opt.cpu, threads};
  const UsePath use(precision);
  const std::string base = precision_of(precision);
  const Phases ph = time_steps(bc, opt.quick ? 1 : opt.steps, clock, threads, base);
  const double flops = cfg.flops_per_token() * tokens;
  std::printf(
      "%s config %c (L=%d C=%d NH=%d T=%d B=%d V=%d), %d thread%s: step %.2f ms (fwd+bwd %.2f, "
      "grads %.2f, norm+clip %.2f, adamw %.2f) | %.0f tok/s | MFU %.1f%% | best step %.2f ms, "
      "MFU %.1f%% (peak %.1f GFLOP/s)\n",
      precision.c_str(), bc.name, bc.layers, bc.dim, bc.heads, bc.seq, bc.batch, bc.vocab, threads,
      threads > 1 ? "s" : "", ph.total * 1e3, ph.fb * 1e3, ph.grads * 1e3, ph.norm * 1e3,
      ph.optim * 1e3, tokens / ph.total, 100 * flops / ph.total * 1e-9 / peak, ph.best * 1e3,
      100 * flops / ph.best * 1e-9 / peak, peak);
  std::fflush(stdout);
  if (!opt.kernels) return tokens / ph.total;
  KernelBench kb(bc, base == "bf16");
  double sum = 0;
  std::vector<std::pair<KernelCall, double>> rows;
  for (KernelCall& k : kb.calls()) {
    const double t = time_call(k.fn, opt.quick, clock) * k.count;
    sum += t;
    rows.emplace_back(std::move(k), t);
  }
  for (const auto& [k, t] : rows) {
    std::printf("  %-26s x%-3d %8.3f ms %5.1f%%", k.name.c_str(), k.count, t * 1e3, 100 * t / sum);
    if (k.flops > 0)
      std::printf(" %7.1f GFLOP/s %4.0f%% of peak", k.flops * k.count / t * 1e-9,
                  100 * k.flops * k.count / t * 1e-9 / peak);
    std::printf("\n");
  }
  std::printf("  %-31s %8.3f ms (measured step %.3f ms)\n", "sum of kernels", sum * 1e3,
              ph.total * 1e3);
  return tokens / ph.total;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--quick"))
      opt.quick = true;
    else if (!std::strcmp(argv[i], "--cpu"))
      opt.cpu = true;
    else if (!std::strcmp(argv[i], "--no-kernels"))
      opt.kernels = false;
    else if (!std::strcmp(argv[i], "--interleave"))
      opt.interleave = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      opt.threads = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc)
      opt.steps = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--configs") && i + 1 < argc)
      opt.configs = argv[++i];
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      opt.rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--precision") && i + 1 < argc) {
      opt.precisions.clear();
      for (std::string list = argv[++i]; !list.empty();) {
        const size_t comma = list.find(',');
        opt.precisions.push_back(list.substr(0, comma));
        list = comma == std::string::npos ? "" : list.substr(comma + 1);
      }
      for (const std::string& p : opt.precisions)
        if (!parse_precision(p)) {
          std::fprintf(stderr,
                       "bench_step: --precision takes fp32, bf16, bf16@primitive or "
                       "bf16@jit_gemm (one available here; got '%s')\n",
                       p.c_str());
          return 2;
        }
    } else {
      std::fprintf(stderr,
                   "usage: bench_step [--quick] [--threads 1,2] [--configs a,b] [--steps 10] "
                   "[--no-kernels] [--cpu] [--precision fp32,bf16] [--rounds R] [--interleave]\n");
      return 2;
    }
  }
  const double peak1 = opt.cpu
                           ? cpu_time_peak(opt.quick)
                           : mt::measure_sgemm_peak_gflops(1, opt.quick ? 0.05 : mt::kPeakSeconds);
  std::printf("sgemm peak, 1 thread: %.1f GFLOP/s (%s time)\n", peak1, opt.cpu ? "CPU" : "wall");
  const bool bf16 = std::any_of(opt.precisions.begin(), opt.precisions.end(),
                                [](const std::string& p) { return precision_of(p) == "bf16"; });
  if (bf16 && !mt::bf16_matmul_supported()) {
    std::fprintf(stderr, "bench_step: this CPU has no oneDNN bf16 matmul\n");
    return 2;
  }
  // MFU of a bf16 run is against the bf16 GEMM peak (wall time; --cpu does not apply).
  const double peak_bf16 =
      bf16 ? mt::measure_bf16_gemm_peak_gflops(1, opt.quick ? 0.05 : mt::kPeakSeconds) : 0;
  if (bf16)
    std::printf("bf16 GEMM peak, 1 thread: %.1f GFLOP/s (oneDNN %s)\n", peak_bf16,
                mt::matmul_bf16_isa().c_str());
  std::fflush(stdout);
  std::vector<std::string> summary;
  for (int threads : opt.threads)
    for (const BenchConfig& bc : kConfigs) {
      if (opt.configs.find(bc.name) == std::string::npos) continue;
      if (opt.interleave) {
        if (opt.precisions.size() != 2) {
          std::fprintf(stderr, "bench_step: --interleave takes two precisions\n");
          return 2;
        }
        std::vector<std::vector<double>> times;
        const int pairs = opt.steps * opt.rounds;
        const std::vector<double> r =
            interleaved_ratios(bc, pairs, Clock{opt.cpu, threads}, threads, opt.precisions, times);
        const double tokens = double(bc.batch) * bc.seq;
        summary.push_back(mt::str(
            "config ", bc.name, ", ", threads, " thread(s), ", pairs,
            " interleaved step pairs: ", opt.precisions[0], " ", int(tokens / median(times[0])),
            " tok/s ", opt.precisions[1], " ", int(tokens / median(times[1])), " tok/s | ",
            opt.precisions[0], "/", opt.precisions[1], " step time: median of the pairs ",
            median(r), "x, ratio of the medians ", median(times[0]) / median(times[1]),
            "x (pair ratios ", *std::min_element(r.begin(), r.end()), "-",
            *std::max_element(r.begin(), r.end()), ")"));
        std::printf("%s\n", summary.back().c_str());
        std::fflush(stdout);
        continue;
      }
      std::vector<std::vector<double>> tps(opt.precisions.size());
      for (int round = 0; round < opt.rounds; round++)
        for (size_t p = 0; p < opt.precisions.size(); p++) {
          const double peak = precision_of(opt.precisions[p]) == "bf16" ? peak_bf16 : peak1;
          tps[p].push_back(bench_config(bc, threads, peak, opt, opt.precisions[p]));
        }
      std::string line = mt::str("config ", bc.name, ", ", threads, " thread(s), median of ",
                                 opt.rounds, " round(s):");
      for (size_t p = 0; p < opt.precisions.size(); p++)
        line += mt::str(" ", opt.precisions[p], " ", int(median(tps[p])), " tok/s");
      if (opt.precisions.size() == 2) {
        // Per round too: the two runs of a round saw about the same load.
        line += mt::str(" | ", opt.precisions[1], "/", opt.precisions[0], " ",
                        median(tps[1]) / median(tps[0]), "x (rounds:");
        for (int r = 0; r < opt.rounds; r++) line += mt::str(" ", tps[1][r] / tps[0][r]);
        line += ")";
      }
      summary.push_back(line);
    }
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
  return 0;
}
