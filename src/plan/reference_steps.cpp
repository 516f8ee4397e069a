// The reference-step probes of --calibrate (calibration_probes.h): `meshtrain train` of the
// reference model (4L d256 T128 vocab 256, batch 8, one thread per rank) in child
// processes, against what the profile's kernel figures predict for the same steps.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "plan/calibrate.h"
#include "plan/calibration_probes.h"
#include "plan/calibration_timing.h"
#include "plan/search.h"

namespace mt::plan {

namespace {

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
double reference_step_seconds(Precision precision, int microbatches, std::ostream& log,
                              int dp = 1) {
  std::vector<double> times;
  for (const nlohmann::json& j :
       reference_train_steps(str("--steps 8 --precision ", precision_name(precision), " --dp ", dp,
                                 " --microbatches ", microbatches)))
    times.push_back(j["step_time_s"].get<double>());
  if (times.empty()) {
    log << "reference step (" << precision_name(precision) << ") not measured: '"
        << own_executable() << " train' did not run here\n";
    return 0;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// What `h` predicts for the reference step (0 when it cannot).
double reference_step_predicted(const HardwareProfile& h, Precision precision, int microbatches,
                                std::ostream& log, int dp = 1) {
  PlanRequest r;
  r.model.layers = 4, r.model.dim = 256, r.model.heads = 8, r.model.seq = 128;
  r.model.vocab = 256;
  r.batch = 8;
  r.hardware = h;
  r.devices = dp;
  r.tp = r.pp = r.virtual_stages = r.ep = 1;
  r.dp = dp;
  r.zero = 0, r.micro_batch = 8 / (dp * microbatches), r.sequence_parallel = false;
  r.recompute = Recompute::none, r.schedule = "1f1b", r.precision = precision;
  try {
    const SearchResult found = search_layouts(r, 1);
    if (!found.candidates.empty()) return found.candidates[0].time.step_s;
  } catch (const std::exception& e) {
    log << "reference step (" << precision_name(precision) << ") not predicted: " << e.what()
        << "\n";
  }
  return 0;
}

// HardwareProfile::step_factor_* and microbatch_weight_s*: the reference step measured in
// 1, 8, 2 and 4 microbatches, once per calibration round (the rounds, not repeats here, see
// the host's drift: calibration_rounds.h), each against what the
// profile's kernel figures alone predict for it (no step factor, no per-microbatch cost), then
// fit_step_factor over the four. An earlier version solved the two unknowns from 1 and 8
// microbatches alone; micro-batch 1 pays more per microbatch than the larger ones the
// layouts use, and the closed loop's 4-microbatch runs read 11% slow from it.
// {F, c}; {0, 0} where the one-microbatch run fails, c 0 where every other one does;
// *one_microbatch: the measured one-microbatch step (0 when it failed).
std::pair<double, double> reference_step_figures(const HardwareProfile& h, Precision precision,
                                                 const ProbeRun& run, double* one_microbatch) {
  std::ostream& log = run.log;
  HardwareProfile g = h;
  g.step_factor_fp32 = g.step_factor_bf16 = 0;
  g.microbatch_weight_s = g.microbatch_weight_s_bf16 = 0;
  // One run per count: the faster of two runs, kept before, read the machine faster than
  // the minutes after it (stop 38's loops read nearly every layout slow by the same share);
  // the rounds' median replaces it (calibration_rounds.h). The one-microbatch run always
  // (the factor needs it), the others while the probe's share of the budget lasts.
  const std::array<int, 4> counts = {1, 8, 2, 4};
  std::array<double, 4> best{};
  ChildBudget budget(run.seconds);
  size_t measured = 0;
  for (; measured < counts.size(); ++measured) {
    if (measured > 0 && !budget.allows(budget.last_run_s())) break;
    best[measured] =
        budget.time([&] { return reference_step_seconds(precision, counts[measured], log); });
  }
  if (measured < counts.size())
    log << "reference step (" << precision_name(precision) << "): " << measured << " of "
        << counts.size() << " microbatch counts within this round's " << run.seconds
        << " s share of --calibrate-seconds (a coarser fit; calibrate longer for all four)\n";
  *one_microbatch = best[0];
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
  log << "reference step (" << precision_name(precision) << "), measured / kernels / fitted, ms:";
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
// ZeRO 0 (fp32, one thread per rank, one run per calibration round), and the efficiency for
// which the profile (its one-rank step factor included) predicts that step, by bisection.
// The sgemm figure (parallel_efficiency above) sees two compute-bound loops; the ranks of a
// real step also share the caches and the memory bandwidth in their pointwise passes and
// meet at the gradient all-reduce, and every multi-rank layout of the closed loop read 5-14%
// faster than measured with the sgemm figure. 0 where the run fails.
double step_parallel_efficiency(const HardwareProfile& h, std::ostream& log) {
  if (h.cores < 2 || h.step_factor_fp32 <= 0) return 0;
  const double measured = reference_step_seconds(Precision::fp32, 1, log, 2);
  if (measured <= 0) return 0;
  auto predicted = [&](double e) {
    HardwareProfile g = h;
    g.parallel_efficiency = e;
    return reference_step_predicted(g, Precision::fp32, 1, log, 2);
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

// This binary's path ("" when /proc is not there): the calibration runs it as a child.
std::string own_executable() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  return exe;
}

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

namespace {

// Each child run is started only where its share of the budget holds at least what the
// profile's kernels predict for its steps (start-up not counted): a short calibration leaves
// the figure unmeasured (0) and says so.
bool child_fits(const ProbeRun& run, double estimate_s, const char* what) {
  if (ChildBudget(run.seconds).allows(estimate_s)) return true;
  run.log << what << " not measured: about " << estimate_s << " s of steps do not fit this "
          << "round's " << run.seconds << " s share of --calibrate-seconds\n";
  return false;
}

}  // namespace

void measure_moe_load_spread(HardwareProfile& h, const ProbeRun& run) {
  // 10 steps of a model whose every block is MoE: at least the dense reference's steps.
  if (child_fits(run, 10 * reference_step_prediction(h, Precision::fp32), "MoE load spread"))
    h.moe_load_cv = moe_load_spread(run.log);
}

void measure_reference_step(HardwareProfile& h, const ProbeRun& run) {
  std::tie(h.step_factor_fp32, h.microbatch_weight_s) =
      reference_step_figures(h, Precision::fp32, run, &h.reference_step_s);
}

void measure_reference_step_bf16(HardwareProfile& h, const ProbeRun& run) {
  std::tie(h.step_factor_bf16, h.microbatch_weight_s_bf16) =
      reference_step_figures(h, Precision::bf16, run, &h.reference_step_s_bf16);
}

double reference_step_prediction(const HardwareProfile& h, Precision precision) {
  std::ostringstream quiet;
  return reference_step_predicted(h, precision, 1, quiet);
}

void measure_step_parallel_efficiency(HardwareProfile& h, const ProbeRun& run) {
  // 8 steps of the dp 2 reference, each about half the one-rank step measured before.
  if (!child_fits(run, 4 * h.reference_step_s,
                  "parallel efficiency from a real dp 2 step (the sgemm figure kept)"))
    return;
  if (const double e = step_parallel_efficiency(h, run.log); e > 0) h.parallel_efficiency = e;
}

}  // namespace mt::plan
