// Small helpers shared by the in-process benchmarks (bench_kernels, bench_dense_bf16,
// bench_step, bench_experts, bench_moe_layer, bench_attention).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/timer.h"

namespace mt::bench {

// "1,2,4" -> {1, 2, 4}
inline std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  for (const char* p = s; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') p++;
    if (*p == ',') p++;
  }
  return out;
}

// n deterministic values uniform in [-scale/2, scale/2) (an LCG: benchmarks need
// repeatable inputs, not good randomness).
inline std::vector<float> filled(size_t n, float scale, uint32_t seed = 12345) {
  std::vector<float> v(n);
  for (float& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = scale * (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
  }
  return v;
}

// "fp32,bf16" -> {"fp32", "bf16"}
inline std::vector<std::string> parse_names(const char* s) {
  std::vector<std::string> out;
  for (const char* p = s; *p;) {
    const char* end = std::strchr(p, ',');
    out.emplace_back(p, end ? end : p + std::strlen(p));
    p = end ? end + 1 : p + std::strlen(p);
  }
  return out;
}

// The expert shape and run settings both MoE benchmarks take (bench_experts,
// bench_moe_layer); each adds its own flags beside them.
struct ExpertBenchOptions {
  bool quick = false, cpu = false;
  int rounds = 5, tokens = 1024, dim = 512, experts = 64, ffn = 256, topk = 8;
  std::vector<std::string> precisions = {"fp32", "bf16"};
};

// When argv[i] is one of ExpertBenchOptions' flags: sets it (a value flag consumes argv[i + 1]
// and advances i) and returns true.
inline bool parse_expert_bench_arg(int argc, char** argv, int& i, ExpertBenchOptions& o) {
  const auto arg = [&](const char* name) { return !std::strcmp(argv[i], name) && i + 1 < argc; };
  const std::pair<const char*, int*> counts[] = {{"--rounds", &o.rounds}, {"--tokens", &o.tokens},
                                                 {"--dim", &o.dim},       {"--experts", &o.experts},
                                                 {"--ffn", &o.ffn},       {"--topk", &o.topk}};
  if (!std::strcmp(argv[i], "--quick")) {
    o.quick = true, o.rounds = 1, o.tokens = 64, o.dim = 64, o.experts = 8, o.ffn = 32;
    return true;
  }
  if (!std::strcmp(argv[i], "--cpu")) {
    o.cpu = true;
    return true;
  }
  for (const auto& [name, value] : counts) {
    if (!arg(name)) continue;
    *value = std::max(1, std::atoi(argv[++i]));
    return true;
  }
  if (!arg("--precision")) return false;
  o.precisions = parse_names(argv[++i]);
  return true;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The 1-minute load average (/proc/loadavg), or -1: what a figure from a shared machine
// must be printed with.
inline double load_average() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  double load = -1;
  if (f && std::fscanf(f, "%lf", &load) != 1) load = -1;
  if (f) std::fclose(f);
  return load;
}

// Wall seconds; or (cpu) the process's CPU seconds divided by `threads`, which other load
// on a shared machine disturbs less than wall time.
inline double clock_seconds(bool cpu, int threads = 1) {
  if (!cpu) return mt::now_seconds();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double(ts.tv_sec) + ts.tv_nsec * 1e-9) / threads;
}

// Mean seconds of one call of fn over a batch of calls at least `batch_s` long.
inline double batch_seconds(const std::function<void()>& fn, double batch_s, bool cpu,
                            int threads = 1) {
  const double start = clock_seconds(cpu, threads);
  int calls = 0;
  do {
    fn();
    calls++;
  } while (clock_seconds(cpu, threads) - start < batch_s);
  return (clock_seconds(cpu, threads) - start) / calls;
}

// Median seconds per call over `batches` batches of batch_seconds, after one untimed call
// (page faults, oneDNN's kernel generation, the team's first start): the one timing loop of
// bench_kernels and bench_dense_bf16.
inline double median_batch_seconds(const std::function<void()>& fn, double batch_s, int batches,
                                   bool cpu = false, int threads = 1) {
  fn();
  std::vector<double> per_call;
  for (int b = 0; b < batches; ++b) per_call.push_back(batch_seconds(fn, batch_s, cpu, threads));
  return median(per_call);
}

}  // namespace mt::bench
