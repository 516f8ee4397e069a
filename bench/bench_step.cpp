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
// A precision may name the bf16 GEMM routine (kernels/matmul_bf16.h): bf16@primitive,
// bf16@jit_gemm or bf16@mixed; plain bf16 takes this CPU's default. --precision
// bf16@primitive,bf16@jit_gemm --interleave compares two routines in one run.
//
//   bench_step [--quick] [--threads 1,2] [--configs a,b] [--steps 10] [--no-kernels] [--cpu]
//              [--precision fp32,bf16] [--rounds 1] [--interleave]
#include <omp.h>

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
#include "kernels/gemm_peak.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "model/gpt.h"
#include "step_config.h"
#include "step_kernel_table.h"
#include "train/session.h"
#include "train/step.h"

namespace {

using mt::bench::model_config;
using BenchConfig = mt::bench::StepConfig;

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
  if (p.precision != "bf16" || (path != "primitive" && path != "jit_gemm" && path != "mixed"))
    return std::nullopt;
  p.path = path == "primitive" ? mt::Bf16GemmPath::primitive
           : path == "mixed"   ? mt::Bf16GemmPath::mixed
                               : mt::Bf16GemmPath::jit_gemm;
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
  double now() const { return mt::bench::clock_seconds(cpu, threads); }
};

using mt::bench::median;

// Fastest of 5 short batches, seconds per call (1 batch in --quick mode): the least
// disturbed by other processes on a shared machine.
double time_call(const std::function<void()>& fn, bool quick, const Clock& clock) {
  fn();  // warm-up: page faults, oneDNN kernel generation
  double best = 0;
  for (int b = 0; b < (quick ? 1 : 5); b++) {
    const double t = mt::bench::batch_seconds(fn, quick ? 0.001 : 0.02, clock.cpu, clock.threads);
    best = b == 0 ? t : std::min(best, t);
  }
  return best;
}

struct Phases {
  double fb = 0, grads = 0, norm = 0, optim = 0, total = 0, best = 0;
};

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
  mt::bench::KernelTable kb(bc, base == "bf16");
  double sum = 0;
  std::vector<std::pair<mt::bench::KernelCall, double>> rows;
  for (mt::bench::KernelCall& k : kb.calls()) {
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

// The command line into opt; false (after the usage line) when it is not understood.
bool parse_args(int argc, char** argv, Options& opt) {
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
    else if (!std::strcmp(argv[i], "--precision") && i + 1 < argc)
      opt.precisions = mt::bench::parse_names(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: bench_step [--quick] [--threads 1,2] [--configs a,b] [--steps 10] "
                   "[--no-kernels] [--cpu] [--precision fp32,bf16] [--rounds R] [--interleave]\n");
      return false;
    }
  }
  for (const std::string& p : opt.precisions)
    if (!parse_precision(p)) {
      std::fprintf(stderr,
                   "bench_step: --precision takes fp32, bf16, bf16@primitive, "
                   "bf16@jit_gemm or bf16@mixed (one available here; got '%s')\n",
                   p.c_str());
      return false;
    }
  if (opt.interleave && opt.precisions.size() != 2) {
    std::fprintf(stderr, "bench_step: --interleave takes two precisions\n");
    return false;
  }
  return true;
}

// --interleave's summary line of one config and thread count.
std::string interleaved_summary(const BenchConfig& bc, int threads, const Options& opt) {
  std::vector<std::vector<double>> times;
  const int pairs = opt.steps * opt.rounds;
  const std::vector<double> r =
      interleaved_ratios(bc, pairs, Clock{opt.cpu, threads}, threads, opt.precisions, times);
  const double tokens = double(bc.batch) * bc.seq;
  return mt::str(
      "config ", bc.name, ", ", threads, " thread(s), ", pairs,
      " interleaved step pairs: ", opt.precisions[0], " ", int(tokens / median(times[0])),
      " tok/s ", opt.precisions[1], " ", int(tokens / median(times[1])), " tok/s | ",
      opt.precisions[0], "/", opt.precisions[1], " step time: median of the pairs ", median(r),
      "x, ratio of the medians ", median(times[0]) / median(times[1]), "x (pair ratios ",
      *std::min_element(r.begin(), r.end()), "-", *std::max_element(r.begin(), r.end()), ")");
}

// The rounds of one config and thread count, each precision in turn; their summary line.
std::string rounds_summary(const BenchConfig& bc, int threads, const Options& opt, double peak1,
                           double peak_bf16) {
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
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse_args(argc, argv, opt)) return 2;
  const bool bf16 = std::any_of(opt.precisions.begin(), opt.precisions.end(),
                                [](const std::string& p) { return precision_of(p) == "bf16"; });
  if (bf16 && !mt::bf16_matmul_supported()) {
    std::fprintf(stderr, "bench_step: this CPU has no oneDNN bf16 matmul\n");
    return 2;
  }
  // The MFU denominators: fp32 on the bench clock; bf16 on wall time (--cpu does not apply).
  const double budget = opt.quick ? 0.05 : mt::kPeakSeconds;
  const double peak1 =
      opt.cpu ? cpu_time_peak(opt.quick) : mt::measure_sgemm_peak_gflops(1, budget);
  std::printf("sgemm peak, 1 thread: %.1f GFLOP/s (%s time)\n", peak1, opt.cpu ? "CPU" : "wall");
  const double peak_bf16 = bf16 ? mt::measure_bf16_gemm_peak_gflops(1, budget) : 0;
  if (bf16)
    std::printf("bf16 GEMM peak, 1 thread: %.1f GFLOP/s (oneDNN %s)\n", peak_bf16,
                mt::matmul_bf16_isa().c_str());
  std::fflush(stdout);
  std::vector<std::string> summary;
  for (int threads : opt.threads)
    for (const BenchConfig& bc : mt::bench::kStepConfigs) {
      if (opt.configs.find(bc.name) == std::string::npos) continue;
      if (!opt.interleave) {
        summary.push_back(rounds_summary(bc, threads, opt, peak1, peak_bf16));
        continue;
      }
      summary.push_back(interleaved_summary(bc, threads, opt));
      std::printf("%s\n", summary.back().c_str());
      std::fflush(stdout);
    }
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
  return 0;
}
