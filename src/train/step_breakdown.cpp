#include "train/step_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "comm/communicator.h"
#include "core/timer.h"
#include "kernels/attention.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/flash_attention.h"
#include "train/session.h"

namespace mt {

StepBreakdown::~StepBreakdown() {
  if (attached_phase_totals() == &totals_) attach_phase_totals(nullptr);
}

void StepBreakdown::after_step(const StepRecord& r) {
  if (!enabled_) return;
  if (!counting_) {
    counting_ = true;
    attach_phase_totals(&totals_);
    last_cpu_s_ = thread_cpu_seconds();
    return;
  }
  ++steps_;
  step_s_ += r.step_time_s;
  forward_backward_s_ += r.phases.forward_backward;
  const double cpu = thread_cpu_seconds();
  step_cpu_s_ += cpu - last_cpu_s_;
  last_cpu_s_ = cpu;
  const double wait = r.comm_exposed_s + (r.tp ? r.tp->wait_s : 0) + (r.cp ? r.cp->wait_s : 0) +
                      (r.ep ? r.ep->wait_s : 0);
  comm_wait_s_ += wait;
  step_each_s_.push_back(r.step_time_s);
  comm_wait_each_s_.push_back(wait);
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

}  // namespace

std::string StepBreakdown::rank_lines(Communicator& world) const {
  if (!enabled_) return "";
  // Per step, in ms: the means of step, forward+backward, comm wait, thread cpu, then the
  // medians of step and comm wait.
  constexpr int kFields = 6;
  const double n = std::max(steps_, 1);
  const double mine[kFields] = {step_s_ * 1e3 / n,          forward_backward_s_ * 1e3 / n,
                                comm_wait_s_ * 1e3 / n,     step_cpu_s_ * 1e3 / n,
                                median(step_each_s_) * 1e3, median(comm_wait_each_s_) * 1e3};
  std::vector<double> all(kFields * size_t(world.size()));
  world.all_gather(mine, all.data(), sizeof mine, DType::u8).wait();
  if (world.rank() != 0 || steps_ == 0) return "";
  std::string out =
      "  per rank (ms/step, means; median step and wait): step, forward+backward, comm wait, "
      "thread cpu\n";
  char line[192];
  for (int r = 0; r < world.size(); ++r) {
    const double* v = all.data() + kFields * r;
    std::snprintf(line, sizeof line,
                  "    rank %d: step %.3f, F+B %.3f, comm wait %.3f, cpu %.3f; median step %.3f, "
                  "median comm wait %.3f\n",
                  r, v[0], v[1], v[2], v[3], v[4], v[5]);
    out += line;
  }
  return out;
}

double measure_copy_bandwidth(double seconds_budget) {
  const size_t bytes = size_t(64) << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 0;
  const double end = now_seconds() + seconds_budget;
  do {
    Stopwatch sw;
    std::memcpy(dst.data(), src.data(), bytes);
    asm volatile("" : : "r"(dst.data()) : "memory");
    best = std::max(best, 2.0 * double(bytes) / sw.elapsed());  // read + write
  } while (now_seconds() < end);
  return best;
}

namespace {

// GEMM-like phases are bound by the GEMM peak, the rest by memory.
bool compute_bound(Phase p) {
  return p == Phase::gemm || p == Phase::attention;
}

std::string isa_line(const Session& s) {
  if (s.opts.optim.precision == Precision::bf16)
    return "bf16 GEMMs: " + dense_bf16_isa(dense_bf16_default_path(s.opts.optim.threads));
  return "fp32 GEMMs: oneDNN sgemm (its own dispatch: avx512_core on this build's targets)";
}

// The kernel the attention phase ran: picked at run time from the CPU, the precision and
// the head dim (kernels/attention.h attention_kernel, kernels/flash_attention.h's path).
std::string attention_line(const Session& s) {
  const ModelConfig& m = s.opts.model;
  const bool bf16 = s.opts.optim.precision == Precision::bf16;
  const int hd = m.head_size > 0 ? m.head_size : m.dim / std::max(1, m.heads);
  if (m.arch == Arch::llama || s.opts.parallel.cp > 1) {
    FlashAttention a;
    a.hd = hd;
    a.precision = bf16 ? FlashPrecision::bf16 : FlashPrecision::fp32;
    return std::string("flash attention, ") + flash_attention_path(a) + " tiles";
  }
  return attention_kernel_name(attention_kernel(bf16, hd, 1));
}

std::string peak_line(const Session& s) {
  if (!s.info.peak) return "no GEMM peak";
  const MfuPeak::Figure& peak = s.info.peak->read();
  if (!peak.method.empty()) return peak.method;
  char line[96];
  std::snprintf(line, sizeof line, "GEMM peak %.1f GFLOP/s per thread", peak.gflops_per_thread);
  return line;
}

}  // namespace

std::string StepBreakdown::table(const Session& s) const {
  if (!enabled_ || steps_ == 0) return "";
  const double n = steps_;
  const int threads = s.opts.optim.threads;
  const double peak =  // this rank's
      s.info.peak ? s.info.peak->read().gflops_per_thread * 1e9 * threads : 0;
  const double bw = measure_copy_bandwidth(0.3);
  std::string out;
  char line[512];
  // A roofline over a time, as a percentage ("-" where there is no roofline).
  auto roof_of = [](double roofline, double seconds) {
    return roofline > 0 ? std::to_string(int(100 * roofline / std::max(seconds, 1e-12))) + "%"
                        : std::string("-");
  };
  // cpu < 0: none (the comm wait, which the thread spends blocked or spinning).
  auto add = [&](const char* name, double seconds, double cpu, double roofline) {
    char cpu_ms[32] = "-";
    if (cpu >= 0) std::snprintf(cpu_ms, sizeof cpu_ms, "%.3f", cpu * 1e3 / n);
    std::snprintf(line, sizeof line, "  %-11s %9.3f %6.1f%% %12.3f %7s %9s %8s\n", name,
                  seconds * 1e3 / n, 100 * seconds / step_s_, roofline * 1e3 / n,
                  roof_of(roofline, seconds).c_str(), cpu_ms,
                  cpu < 0 ? "-" : roof_of(roofline, cpu).c_str());
    out += line;
  };
  // The header names kernels and the peak's method: longer than a table line.
  char header[2048];
  std::snprintf(header, sizeof header,
                "step breakdown (rank 0, %d step(s) after a warm-up, %d thread(s)); %s\n"
                "  attention core: %s\n"
                "  %s: the mfu denominator\n"
                "  copy bandwidth %.1f GB/s (1 thread, memcpy)\n"
                "  %-11s %9s %7s %12s %7s %9s %8s\n",
                steps_, threads, isa_line(s).c_str(), attention_line(s).c_str(),
                peak_line(s).c_str(), bw / 1e9, "phase", "ms/step", "share", "roofline ms",
                "roof/t", "cpu ms", "roof/cpu");
  out += header;
  double kernels = 0, kernels_cpu = 0;
  for (int i = 0; i < kPhases; ++i) {
    const Phase p = Phase(i);
    const double roof = compute_bound(p) ? totals_.flops[i] / peak : totals_.bytes[i] / bw;
    kernels += totals_.seconds[i];
    kernels_cpu += totals_.cpu_seconds[i];
    add(phase_name(p), totals_.seconds[i], totals_.cpu_seconds[i], roof);
  }
  add("comm wait", comm_wait_s_, -1, 0);
  add("framework", std::max(0.0, step_s_ - kernels - comm_wait_s_),
      std::max(0.0, step_cpu_s_ - kernels_cpu), 0);
  const double model_flops = s.opts.model.flops_per_token() * s.opts.optim.batch * s.opts.model.seq;
  std::snprintf(line, sizeof line,
                "  step %.3f ms; model FLOPs at the GEMM peak of all ranks %.3f ms: %.1f%% of "
                "the peak (mfu)\n",
                step_s_ * 1e3 / n, model_flops / s.peak_flops() * 1e3,
                100 * model_flops / s.peak_flops() / (step_s_ / n));
  out += line;
  std::snprintf(line, sizeof line,
                "  rank thread cpu %.3f ms/step: it ran %.0f%% of the step's wall time (below "
                "~95%%: a loaded machine or blocking waits; read the cpu columns)\n",
                step_cpu_s_ * 1e3 / n, 100 * step_cpu_s_ / step_s_);
  out += line;
  return out;
}

}  // namespace mt
