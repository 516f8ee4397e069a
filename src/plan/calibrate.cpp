#include "plan/calibrate.h"

#include <nlohmann/json.hpp>

#include <omp.h>
#include <sched.h>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/world.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/rng.h"
#include "core/system_memory.h"
#include "core/timer.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/gelu.h"
#include "kernels/gemm_peak.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "model/moe_layer.h"
#include "plan/hardware_costs.h"
#include "plan/profile_fields.h"
#include "plan/search.h"
#include "plan/software_profiles.h"

namespace mt::plan {

namespace {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return std::max(int(std::thread::hardware_concurrency()), 1);
}

double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1;
}

// Best time of fn over repeats within `seconds` (the least disturbed by other load);
// before(), untimed, runs ahead of each timed call.
template <typename Fn, typename Before>
double best_time_after(double seconds, Fn fn, Before before) {
  fn();  // warm-up
  double best = 1e30;
  const double t_end = now_seconds() + seconds;
  int runs = 0;
  do {
    before();
    const double t0 = now_seconds();
    fn();
    best = std::min(best, now_seconds() - t0);
    ++runs;
  } while (now_seconds() < t_end || runs < 3);
  return best;
}

template <typename Fn>
double best_time(double seconds, Fn fn) {
  return best_time_after(seconds, fn, [] {});
}

// The same, with the caches emptied of fn's data before each timed call (64 MiB streamed
// through): a kernel inside a training step finds its inputs in memory, written by the
// layers before it, not in the cache from its own previous call.
template <typename Fn>
double best_time_cold(double seconds, Fn fn) {
  static std::vector<float> evict(size_t(16) << 20, 1.0f);
  volatile float sink = 0;
  return best_time_after(seconds, fn, [&] {
    float acc = 0;
    for (size_t i = 0; i < evict.size(); i += 16) acc += (evict[i] += 1.0f);
    sink = sink + acc;
  });
}

double gemm_rate(int M, int N, int K, double seconds) {
  std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(K) * N, 0.25f), c(size_t(M) * N, 0);
  const double t = best_time(seconds, [&] {
    sgemm(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(), N);
  });
  return 2.0 * M * N * K / t;
}

// matmul_bf16_forward of an (M, K) input by an (N, K) weight: the linear layers' bf16 GEMM.
double bf16_gemm_rate(int M, int N, int K, double seconds) {
  std::vector<bf16> a(size_t(M) * K, float_to_bf16(0.5f)), b(size_t(N) * K, float_to_bf16(0.25f));
  std::vector<float> c(size_t(M) * N, 0);
  const double t = best_time(
      seconds, [&] { matmul_bf16_forward(c.data(), a.data(), b.data(), nullptr, M, K, N); });
  return 2.0 * M * N * K / t;
}

// The linear layer's backward GEMMs against the forward the model assumes for the same
// shape (2 N C OC FLOPs at the calibrated peak `peak`): {input-gradient time, weight-gradient
// time} over it. The weight gradient reads its first operand transposed and accumulates
// (docs/precision.md: 72-86% of the bf16 peak where the forward reaches ~90%). Against the
// peak rather than a measured forward of the shape: an isolated fp32 forward of some shapes
// runs far below its rate inside the model (sgemm's transposed-B path), which would
// distort the ratio.
std::pair<double, double> backward_ratios_of(bool bf16_path, double peak, double seconds, int N,
                                             int C, int OC) {
  std::vector<float> x(size_t(N) * C, 0.1f), w(size_t(OC) * C, 0.1f), y(size_t(N) * OC, 0.1f);
  std::vector<float> dx(x.size()), dw(w.size());
  std::vector<bf16> x16(x.size(), 0x3DCD), w16(w.size(), 0x3DCD), y16(y.size(), 0x3DCD);
  const double s = seconds / 2, fwd = 2.0 * N * C * OC / peak;
  double in, wt;
  if (bf16_path) {
    in = best_time(
        s, [&] { matmul_bf16_backward_input(dx.data(), y16.data(), w16.data(), N, C, OC, false); });
    wt = best_time(s, [&] {
      matmul_bf16_backward_weight(dw.data(), nullptr, y16.data(), x16.data(), N, C, OC);
    });
  } else {
    in = best_time(s, [&] { matmul_backward_input(dx.data(), y.data(), w.data(), N, C, OC); });
    wt = best_time(
        s, [&] { matmul_backward_weight(dw.data(), nullptr, y.data(), x.data(), N, C, OC); });
  }
  return {in / fwd, wt / fwd};
}

// The mean over the block's two kinds of linear: widening (1024 x 512 -> 1024, as qkv and
// fc) and narrowing (1024 x 1024 -> 256, as the projections), whose backward passes differ.
std::pair<double, double> backward_ratios(bool bf16_path, double peak, double seconds) {
  const auto [in1, w1] = backward_ratios_of(bf16_path, peak, seconds / 2, 1024, 512, 1024);
  const auto [in2, w2] = backward_ratios_of(bf16_path, peak, seconds / 2, 1024, 1024, 256);
  return {(in1 + in2) / 2, (w1 + w2) / 2};
}

// The attention core a run of `precision` computes, forward and backward FLOP/s of one
// thread (4 B T^2 C forward, twice that backward). The engine's attention is the same fp32
// kernel under both precisions (docs/precision.md: bf16 rounds only the linears' GEMM
// inputs), so both call attention_forward/backward; when the engine gains a bf16 attention
// entry point, "bf16" calls it here and nothing else changes.
std::pair<double, double> attention_rates(const std::string& precision, double seconds) {
  // A block of a small run (8 sequences of 128, 8 heads of 32): its 4 MiB of probabilities
  // spill out of L2 as a real microbatch's do; a smaller shape flatters the backward.
  const int B = 8, T = 128, C = 256, NH = 8;
  std::vector<float> qkv(size_t(B) * T * 3 * C, 0.01f), out(size_t(B) * T * C);
  std::vector<float> att(size_t(B) * NH * T * T), dout(out.size(), 0.01f), dqkv(qkv.size());
  std::vector<float> scratch(attention_backward_scratch_floats(B, T, C, NH));
  // The bf16 block's own calls: bf16 products, results rounded into its bf16 slot buffers.
  std::vector<bf16> out16(out.size()), dqkv16(dqkv.size());
  const bool bf16_run = precision == "bf16";
  const double flops = 4.0 * B * T * T * C;
  // Cold caches: in a step the probabilities written by the forward are read back by the
  // backward only after the rest of the model has run.
  const double fwd = flops / best_time_cold(0.5 * seconds, [&] {
                       if (bf16_run)
                         attention_forward_bf16_out16(out16.data(), out.data(), att.data(),
                                                      qkv.data(), B, T, C, NH);
                       else
                         attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
                     });
  const double bwd =
      2 * flops / best_time_cold(0.5 * seconds, [&] {
        if (bf16_run)
          attention_backward_bf16_out16(dqkv16.data(), dqkv.data(), scratch.data(), dout.data(),
                                        qkv.data(), att.data(), B, T, C, NH);
        else
          attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T,
                             C, NH);
      });
  return {fwd, bwd};
}

// How much a core slows when every core computes: `n` threads each running 512^3 sgemms for
// the same window, their total rate over n x one thread's rate alone (1: independent cores;
// less where vCPUs share a physical core, its caches or its memory bandwidth, as the ranks
// of a dp 2 run do).
double parallel_efficiency(int n, double seconds) {
  if (n <= 1) return 1;
  auto run = [&](int threads) {
    std::vector<double> flops(size_t(threads), 0);
    std::vector<std::thread> pool;
    const double t_end = now_seconds() + seconds / 6;
    const double t0 = now_seconds();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        omp_set_num_threads(1);
        const int m = 512;
        std::vector<float> a(size_t(m) * m, 0.5f), b(a.size(), 0.25f), c(a.size(), 0);
        do {
          sgemm(false, false, m, m, m, 1.0f, a.data(), m, b.data(), m, 0.0f, c.data(), m);
          flops[size_t(t)] += 2.0 * m * m * m;
        } while (now_seconds() < t_end);
      });
    for (auto& th : pool) th.join();
    double total = 0;
    for (double f : flops) total += f;
    return total / (now_seconds() - t0);
  };
  // The best of three windows each, as best_time keeps the least disturbed run.
  double one = 0, all = 0;
  for (int i = 0; i < 3; ++i) one = std::max(one, run(1)), all = std::max(all, run(n));
  return std::clamp(all / (n * one), 0.05, 1.0);
}

// Median time of `iters` all-reduces of `count` floats (or send/recv pairs when p2p)
// between two rank threads of the local backend.
double comm_time(size_t count, int iters, bool p2p, int ranks = 2) {
  std::vector<double> per_rank(size_t(ranks), 0);
  run_local(ranks, WorldOptions{}, [&](CommWorld& w) {
    auto comm = w.world();
    std::vector<float> buf(std::max<size_t>(count, 1), 1.0f);
    std::vector<double> times;
    for (int i = 0; i < iters + 2; ++i) {
      comm->barrier().wait();
      const double t0 = now_seconds();
      if (p2p) {
        if (comm->rank() == 0)
          comm->send(buf.data(), count, DType::f32, 1, 7).wait();
        else
          comm->recv(buf.data(), count, DType::f32, 0, 7).wait();
      } else {
        comm->all_reduce(buf.data(), buf.data(), count, DType::f32, ReduceOp::sum).wait();
      }
      if (i >= 2) times.push_back(now_seconds() - t0);
    }
    std::sort(times.begin(), times.end());
    per_rank[size_t(comm->rank())] = times[times.size() / 2];
  });
  return *std::max_element(per_rank.begin(), per_rank.end());
}

// What one 4-byte all-reduce adds to a loop of `ranks` rank threads that compute between
// collectives (a 128 x 256 x 384 sgemm each, one thread, about the work a tp layer of the
// reference model does between two of its collectives): the loop with an all-reduce after
// every GEMM less the same loop without, per iteration, the better of two runs each. With
// more rank threads than cores the waiter that blocks waits for a peer that is queued behind
// a computing rank; an idle ping-pong (comm_time) does not see that, and read 7-46 us per
// step in calibrations here where the busy loop pays ~200 us per all-reduce.
double busy_collective_seconds(int ranks) {
  constexpr int kIters = 150;
  auto loop = [&](bool with_collective) {
    double best = 0;
    for (int rep = 0; rep < 2; ++rep) {
      const double t0 = now_seconds();
      run_local(ranks, WorldOptions{}, [&](CommWorld& w) {
        omp_set_num_threads(1);
        auto comm = w.world();
        std::vector<float> a(128 * 256, 0.1f), b(384 * 256, 0.1f), c(128 * 384);
        float x = 1;
        comm->barrier().wait();
        for (int i = 0; i < kIters; ++i) {
          matmul_forward(c.data(), a.data(), b.data(), nullptr, 128, 256, 384);
          if (with_collective) comm->all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum).wait();
        }
        comm->barrier().wait();
      });
      const double t = now_seconds() - t0;
      best = rep == 0 ? t : std::min(best, t);
    }
    return best;
  };
  const double without = loop(false), with = loop(true);
  return std::max(0.0, with - without) / kIters;
}

// This binary's path ("" when /proc is not there): the calibration runs it as a child.
std::string own_executable() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  return exe;
}

// `meshtrain train` of the reference model (4L d256 T128 vocab 256, batch 8, one thread per
// rank, constant LR) with `args` added, in a child process with its own temporary
// directory: the metrics records of its steps after the first two (warm-up). Empty when the
// run fails.
std::vector<nlohmann::json> reference_train_steps(const std::string& args) {
  const std::string exe = own_executable();
  if (exe.empty()) return {};
  char dir_template[] = "/tmp/meshtrain-calibrate-XXXXXX";
  if (!mkdtemp(dir_template)) return {};
  const std::string dir = dir_template, metrics = dir + "/m.jsonl";
  const std::string cmd =
      str("cd '", dir, "' && timeout 120 '", exe,
          "' train --layers 4 --dim 256 --heads 8 --seq 128 --vocab 256 --batch 8 --threads 1 "
          "--lr-schedule constant --peak-gflops 100 --quiet ",
          args, " --metrics '", metrics, "' >/dev/null 2>&1");
  std::vector<nlohmann::json> steps;
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("step_time_s") && j.contains("step") &&
          j["step"].get<int>() > 2)
        steps.push_back(std::move(j));
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return steps;
}

// busbw (bytes/s) and time (s) of one size of `meshtrain bench comm --backend mpi` on two
// processes of this machine, started by mpirun; {0, 0} when that does not work here (no
// mpirun, no permission, or it hangs past 60 s): the profile then has no MPI figures.
std::pair<double, double> mpi_bench(const std::string& op, size_t bytes) {
  const std::string exe = own_executable();
  if (exe.empty()) return {0, 0};
  const std::string cmd =
      str("timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 '", exe,
          "' bench comm --backend mpi --op ", op, " --min-bytes ", bytes, " --max-bytes ", bytes,
          " 2>/dev/null");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {0, 0};
  double size = 0, count = 0, us = 0, algbw = 0, busbw = 0;
  char line[1024];
  bool found = false;
  while (std::fgets(line, sizeof line, pipe))
    if (line[0] != '#' &&
        std::sscanf(line, "%lf %lf %lf %lf %lf", &size, &count, &us, &algbw, &busbw) == 5)
      found = true;
  if (pclose(pipe) != 0 || !found) return {0, 0};
  return {busbw * 1e9, us * 1e-6};
}

// The engine's MoE layer (model/moe_layer.cpp) at the reference step's shape as an MoE
// block (N 1024 tokens, C 256, 4 experts, top-2, one rank, one thread), timed per pass
// (forward, backward_input, backward_weight; the best run of each), less what
// local_moe_costs gives its router and expert GEMMs for the rows each expert received
// (same calls, same bf16 chunks): what is left per expert hidden element (rows x 4C) is
// {moe_fwd_s, moe_bwd_s, moe_wgt_s} of `h`'s GEMM figures (measured before this).
// Weights are drawn as the engine initialises them (normal, std 0.02) and the input as
// LayerNorm leaves it (unit variance), so the router spreads rows nearly evenly.
std::array<double, 3> moe_layer_costs(const HardwareProfile& h, bool bf16, double seconds) {
  ModelConfig cfg;
  cfg.layers = 4, cfg.dim = 256, cfg.heads = 8, cfg.seq = 128, cfg.vocab = 256;
  cfg.experts = 4, cfg.topk = 2;
  const int N = 8 * cfg.seq, C = cfg.dim, H = cfg.hidden();
  uint64_t version = 1;
  ExpertParallelShard ep;
  if (bf16) ep.bf16_version = &version;
  ParamTable table;
  SlotLayout layout;
  MoeLayer layer(0, cfg, ep, N, table, layout);
  std::vector<float> params(table.total()), grads(table.total(), 0), slot(layout.total());
  std::vector<float> stage(std::max<size_t>(layer.bf16_stage_floats(), 1));
  for (size_t i = 0; i < params.size(); ++i) params[i] = float(0.02 * normal01(11, 1, i));
  layer.bind(params.data(), grads.data());
  if (bf16) layer.set_bf16_stage(stage.data());
  std::vector<float> x(size_t(N) * C), y(x.size()), dy(x.size()), dx(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(normal01(11, 2, i)), dy[i] = float(1e-3 * normal01(11, 3, i));
  // The rows each expert gets (the same input routes the same way every call).
  layer.reset_stats();
  layer.forward(slot.data(), x.data(), y.data(), N);
  std::vector<double> rows;
  for (const int64_t r : layer.stats().load) rows.push_back(double(r));
  const double s = seconds / 3;
  const double fwd = best_time_cold(s, [&] { layer.forward(slot.data(), x.data(), y.data(), N); });
  const double bwd = best_time_cold(
      s, [&] { layer.backward_input(slot.data(), x.data(), dy.data(), dx.data(), N); });
  const double wgt = best_time_cold(s, [&] { layer.backward_weight(slot.data(), x.data(), N); });
  HardwareProfile g = h;
  g.step_factor_fp32 = g.step_factor_bf16 = 0;
  g.moe_fwd_s = g.moe_bwd_s = g.moe_wgt_s = 0;
  g.moe_fwd_s_bf16 = g.moe_bwd_s_bf16 = g.moe_wgt_s_bf16 = 0;
  const ComputeRates R = compute_rates(g, bf16 ? "bf16" : "fp32", 1, 1);
  const ComputeRates R32 = compute_rates(g, "fp32", 1, 1);
  const MoeCosts gemms =
      local_moe_costs(R, R32, rows, N, cfg.experts, C, H, bf16, MoeLayer::bf16_chunk_rows(N));
  const double elems = double(N) * cfg.topk * H;
  // A small floor keeps the figure "measured" (0 means absent) where the GEMM formula
  // already exceeds the layer.
  auto per = [&](double t, double model) { return std::max(t - model, 1e-3 * t) / elems; };
  return {per(fwd, gemms.forward), per(bwd, gemms.backward), per(wgt, gemms.weight)};
}

// The spread of the engine's router (HardwareProfile::moe_load_cv): `meshtrain train` of
// the reference model with 4 experts top-2 (every block MoE), one rank, 10 steps, in a
// child process; the per-expert loads it records (expert_load, per block) of steps 3-10,
// as the closed loop and a real run see them after the first steps: the mean over blocks
// and steps of their coefficient of variation. 0 when the run fails.
double moe_load_spread(std::ostream& log) {
  double sum = 0;
  int count = 0;
  for (const nlohmann::json& j : reference_train_steps("--experts 4 --topk 2 --steps 10")) {
    if (!j.contains("expert_load")) continue;
    for (const auto& block : j["expert_load"]) {
      double mean = 0, var = 0;
      for (const auto& v : block) mean += v.get<double>();
      mean /= double(block.size());
      for (const auto& v : block) var += (v.get<double>() - mean) * (v.get<double>() - mean);
      if (mean <= 0) continue;
      sum += std::sqrt(var / double(block.size())) / mean;
      ++count;
    }
  }
  if (count == 0) {
    log << "MoE load spread not measured: '" << own_executable()
        << " train --experts 4' did not run here\n";
    return 0;
  }
  return sum / count;
}

// The reference step: one rank (dp ranks), one thread each, 4L d256 T128 B8 in
// `microbatches` microbatches, 8 steps of `meshtrain train` in a child process; the median
// step_time_s of steps 3-8. 0 when the run fails.
double reference_step_seconds(const std::string& precision, int microbatches, std::ostream& log,
                              int dp = 1) {
  std::vector<double> times;
  for (const nlohmann::json& j : reference_train_steps(str(
           "--steps 8 --precision ", precision, " --dp ", dp, " --microbatches ", microbatches)))
    times.push_back(j["step_time_s"].get<double>());
  if (times.empty()) {
    log << "reference step (" << precision << ") not measured: '" << own_executable()
        << " train' did not run here\n";
    return 0;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// What `h` predicts for the reference step (0 when it cannot).
double reference_step_predicted(const HardwareProfile& h, const std::string& precision,
                                int microbatches, std::ostream& log, int dp = 1) {
  PlanRequest r;
  r.model.layers = 4, r.model.dim = 256, r.model.heads = 8, r.model.seq = 128;
  r.model.vocab = 256;
  r.batch = 8;
  r.hardware = h;
  r.devices = dp;
  r.tp = r.pp = r.virtual_stages = r.ep = 1;
  r.dp = dp;
  r.zero = 0, r.micro_batch = 8 / (dp * microbatches), r.sequence_parallel = false;
  r.recompute = "none", r.schedule = "1f1b", r.precision = precision;
  try {
    const SearchResult found = search_layouts(r, 1);
    if (!found.candidates.empty()) return found.candidates[0].time.step_s;
  } catch (const std::exception& e) {
    log << "reference step (" << precision << ") not predicted: " << e.what() << "\n";
  }
  return 0;
}

// HardwareProfile::step_factor_* and microbatch_weight_s*: the reference step measured in
// 1, 8, 2 and 4 microbatches, `passes` times over (2 unless the calibration is short; the
// host's speed drifts by up to ~15% within minutes, docs/planner.md), each against what the
// profile's kernel figures alone predict for it (no step factor, no per-microbatch cost), then
// fit_step_factor over the four. An earlier version solved the two unknowns from 1 and 8
// microbatches alone; micro-batch 1 pays more per microbatch than the larger ones the
// layouts use, and the closed loop's 4-microbatch runs read 11% slow from it.
// {F, c}; {0, 0} where the one-microbatch run fails, c 0 where every other one does.
std::pair<double, double> reference_step_figures(const HardwareProfile& h,
                                                 const std::string& precision, int passes,
                                                 std::ostream& log) {
  HardwareProfile g = h;
  g.step_factor_fp32 = g.step_factor_bf16 = 0;
  g.microbatch_weight_s = g.microbatch_weight_s_bf16 = 0;
  // Two passes over the microbatch counts, the faster median of the two for each: a burst
  // of the host's load slows a whole run by 10-20% at times (a quiet calibration here read
  // 103.5 ms for a 4-microbatch bf16 step that measures 90 ms on its own, and 80 ms for
  // one microbatch), and five single runs left one such point in the fit.
  const std::array<int, 4> counts = {1, 8, 2, 4};
  std::array<double, 4> best{};
  for (int pass = 0; pass < passes; ++pass)
    for (size_t i = 0; i < counts.size(); ++i) {
      const double measured = reference_step_seconds(precision, counts[i], log);
      if (measured > 0 && (best[i] == 0 || measured < best[i])) best[i] = measured;
    }
  std::vector<ReferenceStep> steps;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double kernels = best[i] > 0 ? reference_step_predicted(g, precision, counts[i], log) : 0;
    if (kernels > 0) steps.push_back({counts[i], kernels, best[i]});
  }
  const bool one = std::any_of(steps.begin(), steps.end(),
                               [](const ReferenceStep& r) { return r.microbatches == 1; });
  if (!one) return {0, 0};
  const double W = 4 * 12.0 * 256 * 256 + 256.0 * 256;
  const bool several = std::any_of(steps.begin(), steps.end(),
                                   [](const ReferenceStep& r) { return r.microbatches > 1; });
  if (!several) {
    double sum = 0;
    for (const ReferenceStep& r : steps) sum += r.measured_s / r.kernels_s;
    return {std::clamp(sum / double(steps.size()), 0.5, 3.0), 0.0};
  }
  const auto [F, c] = fit_step_factor(steps, W);
  // The points and the fit, so a user can see how well the line holds on this machine.
  char line[96];
  log << "reference step (" << precision << "), measured / kernels / fitted, ms:";
  for (const ReferenceStep& r : steps) {
    std::snprintf(line, sizeof line, " m%d %.1f/%.1f/%.1f", r.microbatches, r.measured_s * 1e3,
                  r.kernels_s * 1e3, (F * r.kernels_s + r.microbatches * W * c) * 1e3);
    log << line;
  }
  std::snprintf(line, sizeof line, "; factor %.3f, per microbatch %.2f ms\n", F, W * c * 1e3);
  log << line;
  return {F, c};
}
// HardwareProfile::parallel_efficiency from a real step: the reference model under dp 2
// ZeRO 0 (fp32, one thread per rank, the faster median of two runs), and the efficiency for
// which the profile (its one-rank step factor included) predicts that step, by bisection.
// The sgemm figure (parallel_efficiency above) sees two compute-bound loops; the ranks of a
// real step also share the caches and the memory bandwidth in their pointwise passes and
// meet at the gradient all-reduce, and every multi-rank layout of the closed loop read 5-14%
// faster than measured with the sgemm figure. 0 where the run fails.
double step_parallel_efficiency(const HardwareProfile& h, int passes, std::ostream& log) {
  if (h.cores < 2 || h.step_factor_fp32 <= 0) return 0;
  double measured = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const double m = reference_step_seconds("fp32", 1, log, 2);
    if (m > 0 && (measured == 0 || m < measured)) measured = m;
  }
  if (measured <= 0) return 0;
  auto predicted = [&](double e) {
    HardwareProfile g = h;
    g.parallel_efficiency = e;
    return reference_step_predicted(g, "fp32", 1, log, 2);
  };
  double lo = 0.3, hi = 1.0;
  if (predicted(hi) >= measured) return hi;
  if (predicted(lo) <= measured) return lo;
  for (int i = 0; i < 30; ++i) {
    const double mid = (lo + hi) / 2;
    (predicted(mid) > measured ? lo : hi) = mid;
  }
  char line[160];
  std::snprintf(line, sizeof line,
                "reference step (fp32, dp 2): measured %.1f ms, predicted %.1f ms at the sgemm "
                "figure %.0f%%; parallel efficiency %.0f%%\n",
                measured * 1e3, predicted(h.parallel_efficiency) * 1e3, 100 * h.parallel_efficiency,
                100 * hi);
  log << line;
  return hi;
}

}  // namespace

namespace {

// The profile's place, checked before minutes of measuring: its directory made, and
// whatever is there now a regular file (a FIFO, device or directory is refused; the
// profile replaces a file atomically, core/atomic_file.h).
void prepare_profile_output(const std::string& path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  require_output_file("--profile", path);
}

}  // namespace

std::pair<double, double> fit_step_factor(const std::vector<ReferenceStep>& steps, double weights) {
  MT_CHECK(!steps.empty() && weights > 0, "fit_step_factor without reference steps");
  // Relative residuals: (F a + c b - 1) with a = K/M, b = m W/M; the normal equations of
  // two unknowns.
  double aa = 0, ab = 0, bb = 0, a1 = 0, b1 = 0, least = steps[0].measured_s;
  for (const ReferenceStep& r : steps) {
    const double a = r.kernels_s / r.measured_s, b = r.microbatches * weights / r.measured_s;
    aa += a * a, ab += a * b, bb += b * b, a1 += a, b1 += b;
    least = std::min(least, r.measured_s);
  }
  // A small floor keeps the figure "measured" (0 means absent) where the kernels already
  // account for the microbatches.
  const double floor = 1e-3 * least / (8 * weights);
  const double det = aa * bb - ab * ab;
  double F = 0, c = -1;
  if (det > 1e-12 * aa * bb) F = (a1 * bb - b1 * ab) / det, c = (aa * b1 - ab * a1) / det;
  if (!(c >= floor)) {
    // The fit wants no (or a negative) per-microbatch cost: the floor, and F for it.
    c = floor;
    double num = 0;
    for (const ReferenceStep& r : steps) {
      const double a = r.kernels_s / r.measured_s, b = r.microbatches * weights / r.measured_s;
      num += a * (1 - b * c);
    }
    F = num / aa;
  }
  return {std::clamp(F, 0.5, 3.0), c};
}

std::string default_local_profile_path() {
  if (const char* p = std::getenv("MESHTRAIN_PROFILE"); p && *p) return p;
  std::filesystem::path base(".");
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    base = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = std::filesystem::path(h) / ".cache";
  return (base / "meshtrain" / "hardware-local.toml").string();
}

HardwareProfile load_local_profile(const std::string& path) {
  std::error_code ec;
  MT_REQUIRE(std::filesystem::exists(std::filesystem::symlink_status(path, ec)),
             "no local hardware profile at ", path,
             "; run 'meshtrain plan --calibrate' first (or give --profile FILE)");
  HardwareProfile h = load_profile(path);
  MT_REQUIRE(h.local, path, " is not a local profile (local = true); it describes '", h.name, "'");
  return h;
}

HardwareProfile calibrate_local(const std::string& path, double seconds, std::ostream& log) {
  prepare_profile_output(path);
  const double t_start = now_seconds();
  const double load_before = load_average();
  HardwareProfile h;
  h.name = "local";
  h.local = true;
  apply_software(h, kLocalSoftware);
  h.devices_per_node = 1 << 20;  // one shared-memory machine
  h.cores = usable_cores();
  const int64_t avail = available_memory_bytes();
  h.memory_bytes = avail > 0 ? double(avail) : 8.0 * (1 << 30);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  // GEMM: the best square sgemm of one thread is the peak (efficiency 1 by definition);
  // a K = 64 GEMM gives the small-dimension penalty d/(d + half).
  h.peak_fp32 = measure_sgemm_peak_gflops(1, 0.3 * seconds) * 1e9;
  h.gemm_efficiency = 1;
  h.parallel_efficiency = parallel_efficiency(h.cores, 0.06 * seconds);
  const double d = 64;
  const double small = gemm_rate(1024, 1024, int(d), 0.1 * seconds);
  h.gemm_half_dim = std::max(0.0, d * (h.peak_fp32 / small - 1));
  std::tie(h.gemm_input_grad_ratio, h.gemm_weight_grad_ratio) =
      backward_ratios(false, h.peak_fp32, 0.06 * seconds);
  // Per-call overhead: a 16^3 GEMM is all overhead.
  {
    std::vector<float> a(256, 1), b(256, 1), c(256, 0);
    h.kernel_overhead_s = best_time(0.02 * seconds,
                                    [&] {
                                      for (int i = 0; i < 100; ++i)
                                        sgemm(false, false, 16, 16, 16, 1.0f, a.data(), 16,
                                              b.data(), 16, 0.0f, c.data(), 16);
                                    }) /
                          100;
  }
  // Memory-bound: y += x over 32 MiB arrays, 12 bytes moved per element.
  {
    const size_t n = size_t(8) << 20;
    std::vector<float> x(n, 1.0f), y(n, 2.0f);
    const double t = best_time(0.1 * seconds, [&] {
      for (size_t i = 0; i < n; ++i) y[i] += x[i];
    });
    h.memory_bw = 12.0 * double(n) / t;
  }
  // The engine's attention kernel (B 8, T 128, C 256, 8 heads: the shapes of small runs)
  // and its pointwise passes (GELU, LayerNorm over 1 Mi elements), one thread.
  {
    std::tie(h.attention_fwd_flops, h.attention_bwd_flops) = attention_rates("fp32", 0.1 * seconds);
    const int N = 2048, D = 512;
    std::vector<float> x(size_t(N) * D, 0.3f), y(x.size()), mean(N), rstd(N), w(D, 1), bias(D);
    const double gelu =
        best_time(0.03 * seconds, [&] { gelu_forward(y.data(), x.data(), x.size()); });
    const double ln = best_time(0.03 * seconds, [&] {
      layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, D);
    });
    h.pointwise_s = std::max(gelu, ln) / double(x.size());
  }
  // --precision bf16 (where oneDNN has a bf16 matmul here): the bf16 GEMM's one-thread peak,
  // its small-dimension penalty (1024 x 1024 x 64) and per-call overhead (16^3), rounding
  // to bf16 per element (2 Mi floats: a block's activations or a weight matrix, mostly out
  // of the L2), and the attention core of a bf16 run.
  if (bf16_matmul_supported()) {
    h.peak_bf16 = measure_bf16_gemm_peak_gflops(1, 0.15 * seconds) * 1e9;
    const double small16 = bf16_gemm_rate(1024, 1024, int(d), 0.05 * seconds);
    h.gemm_half_dim_bf16 = std::max(0.0, d * (h.peak_bf16 / small16 - 1));
    std::tie(h.gemm_input_grad_ratio_bf16, h.gemm_weight_grad_ratio_bf16) =
        backward_ratios(true, h.peak_bf16, 0.06 * seconds);
    {
      std::vector<bf16> a(256, 0x3F80), b(256, 0x3F80);
      std::vector<float> c(256, 0);
      h.bf16_overhead_s =
          best_time(0.02 * seconds,
                    [&] {
                      for (int i = 0; i < 100; ++i)
                        matmul_bf16_forward(c.data(), a.data(), b.data(), nullptr, 16, 16, 16);
                    }) /
          100;
    }
    {
      const size_t n = size_t(2) << 20;
      std::vector<float> x(n, 0.3f);
      std::vector<bf16> y(n);
      h.bf16_convert_s =
          best_time(0.03 * seconds, [&] { to_bf16(y.data(), x.data(), n); }) / double(n);
    }
    std::tie(h.attention_bf16_fwd_flops, h.attention_bf16_bwd_flops) =
        attention_rates("bf16", 0.1 * seconds);
  } else {
    h.peak_bf16 = 0;
    log << "bf16 not measured (oneDNN has no bf16 matmul on this CPU): local plans are fp32\n";
  }
  omp_set_num_threads(saved);
  // The local backend between two rank threads: busbw of a 16 MiB all-reduce
  // (2(n-1)/n = 1 for two ranks), the latency of a one-float all-reduce (2 log2 n = 2
  // steps), a 16 MiB send.
  const size_t big = size_t(4) << 20;
  const int iters = std::max(3, int(seconds / 4));
  h.intra_busbw = 4.0 * double(big) / comm_time(big, iters, false);
  h.intra_latency_s = comm_time(1, 4 * iters, false) / 2;
  h.p2p_bw_intra = 4.0 * double(big) / comm_time(big, iters, true);
  // More rank threads than cores: the local backend's waiters yield and then block
  // (comm/local/doorbell.h), so a collective waits for its peers to be scheduled behind the
  // ranks that compute: what a one-float all-reduce adds to busy ranks, 2 x cores of them,
  // per step of the all-reduce (2 log2 ranks).
  h.oversubscribed_latency_s =
      busy_collective_seconds(2 * h.cores) / (2 * std::ceil(std::log2(2.0 * h.cores)));
  h.inter_busbw = h.intra_busbw;
  h.inter_latency_s = h.intra_latency_s;
  h.p2p_bw_inter = h.p2p_bw_intra;
  // The MPI backend (two processes): 16 MiB all-reduce busbw, a 4-byte all-reduce's time as
  // its latency (2 steps), a 16 MiB broadcast (one send between two ranks) as p2p.
  const auto [mpi_bw, mpi_big_s] = mpi_bench("all_reduce", size_t(16) << 20);
  const auto [mpi_small_bw, mpi_small_s] = mpi_bench("all_reduce", 4);
  const auto [mpi_p2p, mpi_p2p_s] = mpi_bench("broadcast", size_t(16) << 20);
  (void)mpi_big_s, (void)mpi_small_bw, (void)mpi_p2p_s;
  if (mpi_bw > 0 && mpi_p2p > 0 && mpi_small_s > 0) {
    h.mpi_busbw = mpi_bw;
    h.mpi_latency_s = mpi_small_s / 2;
    h.mpi_p2p_bw = mpi_p2p;
  } else {
    log << "MPI backend not measured (mpirun did not run 'meshtrain bench comm' here)\n";
  }
  // The MoE layer beyond its GEMMs (one thread) and the router's load spread in training.
  omp_set_num_threads(1);
  const std::array<double, 3> moe32 = moe_layer_costs(h, false, 0.04 * seconds);
  h.moe_fwd_s = moe32[0], h.moe_bwd_s = moe32[1], h.moe_wgt_s = moe32[2];
  if (h.peak_bf16 > 0) {
    const std::array<double, 3> moe16 = moe_layer_costs(h, true, 0.04 * seconds);
    h.moe_fwd_s_bf16 = moe16[0], h.moe_bwd_s_bf16 = moe16[1], h.moe_wgt_s_bf16 = moe16[2];
  }
  omp_set_num_threads(saved);
  h.moe_load_cv = moe_load_spread(log);
  // The reference runs are a fixed cost (~2 s each): a short calibration (the tests' 2 s)
  // runs each once, a real one twice and keeps the faster.
  const int passes = seconds >= 10 ? 2 : 1;
  std::tie(h.step_factor_fp32, h.microbatch_weight_s) =
      reference_step_figures(h, "fp32", passes, log);
  if (h.peak_bf16 > 0)
    std::tie(h.step_factor_bf16, h.microbatch_weight_s_bf16) =
        reference_step_figures(h, "bf16", passes, log);
  if (const double e = step_parallel_efficiency(h, passes, log); e > 0) h.parallel_efficiency = e;
  const double load_after = load_average();
  if (std::max(load_before, load_after) > 0.5 * h.cores)
    log << "warning: the machine was busy (load average " << load_before << " -> " << load_after
        << " on " << h.cores << " cores): the figures measure that load too, "
        << "parallel_efficiency above all; calibrate on a quiet machine\n";
  char line[1024];
  std::snprintf(line, sizeof line,
                "measured by meshtrain plan --calibrate in %.1f s, load average %.2f -> %.2f, "
                "%d cores",
                now_seconds() - t_start, load_before, load_after, h.cores);
  h.sources = {
      line,
      "peak_fp32: best single-thread sgemm (engine GEMM path) of 512..2048 squares",
      "gemm_half_dim: from a 1024x1024x64 sgemm's rate",
      "memory_bw: one thread streaming y += x over 32 MiB",
      "attention_*: the engine's attention kernel, B 8 T 128 C 256 NH 8, one thread, caches "
      "emptied before each call",
      "pointwise_s: the slower of GELU and LayerNorm forward per element, one thread",
      "intra_*: local backend, two rank threads, 16 MiB all-reduce / send, 4 B "
      "all-reduce latency",
      "peak_bf16: best single-thread bf16 GEMM (oneDNN matmul_bf16_forward) of "
      "512..2048 squares; gemm_half_dim_bf16 from 1024x1024x64, bf16_overhead_s a 16^3 "
      "call, bf16_convert_s to_bf16 of 2 Mi floats per element",
      "attention_bf16_*: the attention core of a bf16 run (the bf16 block's kernels)",
      "gemm_*_grad_ratio*: the linear layer's input-/weight-gradient GEMM time over 2MNK / "
      "peak, mean of 1024 x 512 -> 1024 and 1024 x 1024 -> 256, fp32 and bf16",
      "oversubscribed_latency_s: what a 4-byte all-reduce adds to 2 x cores rank threads "
      "that each run a 128x256x384 sgemm between collectives, / (2 log2 ranks)",
      "parallel_efficiency: the value for which this profile predicts a real dp 2 step of "
      "the reference model (ZeRO 0, fp32, one thread per rank, the faster of two runs) as "
      "measured; without that run, sgemm rate of every core at once over cores x one core's",
      "step_factor_*, microbatch_weight_s*: a real one-rank step (meshtrain train, 4L d256 "
      "T128 B8, one thread, median of steps 3-8) in 1, 8, 2 and 4 microbatches, the faster "
      "of two runs each, per precision, against this profile's kernel prediction K for "
      "each: step = factor x K + microbatches x linear weights x microbatch_weight_s, "
      "fitted to the four by least squares on the relative error; the factor scales every "
      "local compute cost",
      "moe_*_s*: the engine's MoE layer (N 1024, C 256, 4 experts top-2, one thread, caches "
      "emptied) per pass less the planner's GEMM time for its router and experts, per expert "
      "hidden element; moe_load_cv: per-expert load spread of meshtrain train --experts 4 "
      "(4L d256 T128 B8), steps 3-10",
      "mpi_*: meshtrain bench comm --backend mpi under mpirun -np 2: 16 MiB "
      "all-reduce busbw, 4 B all-reduce time / 2, 16 MiB broadcast busbw"};
  const std::string bad = profile_field_error(h);
  if (!bad.empty()) throw RuntimeError(str("the calibration measured an invalid figure: ", bad));
  write_file_atomic(path, profile_to_toml(h));
  std::snprintf(
      line, sizeof line,
      "sgemm %.1f GFLOP/s per thread (half-rate dim %.0f), attention %.1f/%.1f "
      "GFLOP/s, pointwise %.2f ns/element, stream %.2f GB/s, overhead %.1f us, "
      "all-reduce busbw %.2f GB/s, latency %.1f us, p2p %.2f GB/s; MPI busbw %.2f "
      "GB/s, latency %.1f us, p2p %.2f GB/s; bf16 GEMM %.1f GFLOP/s (half-rate dim "
      "%.0f, overhead %.1f us), to_bf16 %.3f ns/element, bf16-run attention %.1f/%.1f "
      "GFLOP/s; backward GEMM time over the peak's fp32 %.2f/%.2f, bf16 %.2f/%.2f; "
      "oversubscribed latency %.1f us; all cores at %.0f%% of one core's rate each; a real "
      "step %.2fx (fp32) / %.2fx (bf16) its kernels\n",
      h.peak_fp32 / 1e9, h.gemm_half_dim, h.attention_fwd_flops / 1e9, h.attention_bwd_flops / 1e9,
      h.pointwise_s * 1e9, h.memory_bw / 1e9, h.kernel_overhead_s * 1e6, h.intra_busbw / 1e9,
      h.intra_latency_s * 1e6, h.p2p_bw_intra / 1e9, h.mpi_busbw / 1e9, h.mpi_latency_s * 1e6,
      h.mpi_p2p_bw / 1e9, h.peak_bf16 / 1e9, h.gemm_half_dim_bf16, h.bf16_overhead_s * 1e6,
      h.bf16_convert_s * 1e9, h.attention_bf16_fwd_flops / 1e9, h.attention_bf16_bwd_flops / 1e9,
      h.gemm_input_grad_ratio, h.gemm_weight_grad_ratio, h.gemm_input_grad_ratio_bf16,
      h.gemm_weight_grad_ratio_bf16, h.oversubscribed_latency_s * 1e6, 100 * h.parallel_efficiency,
      h.step_factor_fp32, h.step_factor_bf16);
  log << line << h.sources[0] << "\nwrote " << path << "\n";
  return h;
}

}  // namespace mt::plan
