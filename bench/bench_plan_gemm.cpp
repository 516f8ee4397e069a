// The linear layers' GEMMs of a model timed against the planner's local GEMM formula
// (plan/hardware_costs.h local_gemm_seconds) for a calibrated profile: fp32 and bf16,
// forward / input-gradient / weight-gradient, at the four linear shapes of a block (qkv,
// proj, fc, mlp_proj), in thread CPU time on one thread, best of 7.
//
//   bench_plan_gemm [--profile FILE] [--dim C] [--rows N] [--quick]
//
// The profile is `meshtrain plan --calibrate`'s (default $MESHTRAIN_PROFILE); without one
// only the measured times are printed. The defaults (and MT_PLAN_DIM, MT_PLAN_ROWS, which
// they come from) are d 256 and 1024 rows; --quick is d 64, 64 rows, for the smoke run.
// --cold empties the caches (64 MiB streamed, untimed) before every timed call: inside a
// step a linear's operands were written by the layers before it, and at a few hundred rows
// whether they come from the caches or from memory moves a bf16 GEMM's rate by 15-45% on
// an AMD EPYC (stop 41), far more than its shape does.
// The machine is shared: read the ratios as a diagnosis, never as a pass or fail.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "plan/hardware_costs.h"
#include "plan/hardware_profile.h"

namespace mt::plan {
namespace {

struct Options {
  std::string profile;
  int dim = 256, rows = 1024;
  bool cold = false;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* p = std::getenv("MESHTRAIN_PROFILE")) o.profile = p;
  o.dim = env_int("MT_PLAN_DIM", o.dim);
  o.rows = env_int("MT_PLAN_ROWS", o.rows);
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--quick")) {
      o.dim = o.rows = 64;
    } else if (!std::strcmp(argv[i], "--cold")) {
      o.cold = true;
    } else if (!std::strcmp(argv[i], "--profile") && has_value) {
      o.profile = argv[++i];
    } else if (!std::strcmp(argv[i], "--dim") && has_value) {
      o.dim = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--rows") && has_value) {
      o.rows = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: bench_plan_gemm [--profile FILE] [--dim C] [--rows N] [--cold] "
                   "[--quick]\n");
      std::exit(2);
    }
  }
  if (o.dim < 1 || o.rows < 1) {
    std::fprintf(stderr, "bench_plan_gemm: --dim and --rows must be >= 1\n");
    std::exit(2);
  }
  return o;
}

double thread_cpu_now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Streams 64 MiB through the caches (--cold), so that the next call finds its operands in
// memory.
void empty_caches() {
  static std::vector<float> evict(size_t(16) << 20, 1.0f);
  static volatile float sink = 0;
  float acc = 0;
  for (size_t i = 0; i < evict.size(); i += 16) acc += (evict[i] += 1.0f);
  sink = sink + acc;
}

// Thread CPU seconds of the best of 7 calls after a warm-up (oneDNN builds its kernel on
// the first call): a preempted call does not count. `cold`: the caches emptied before each.
template <typename Fn>
double best_of_7(bool cold, Fn fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < 7; ++i) {
    if (cold) empty_caches();
    const double t0 = thread_cpu_now();
    fn();
    best = std::min(best, thread_cpu_now() - t0);
  }
  return best;
}

struct GemmTimes {
  double fwd, bwd_in, bwd_w;
};

// The three GEMMs of a linear layer in (in) -> out (out) over N rows.
GemmTimes time_linear(bool bf16_gemms, bool cold, int N, int in, int out) {
  std::vector<float> x(size_t(N) * in, 0.1f), w(size_t(out) * in, 0.1f), y(size_t(N) * out, 0.1f),
      dw(w.size()), dx(x.size());
  if (!bf16_gemms)
    return {
        best_of_7(cold, [&] { matmul_forward(y.data(), x.data(), w.data(), nullptr, N, in, out); }),
        best_of_7(cold, [&] { matmul_backward_input(dx.data(), y.data(), w.data(), N, in, out); }),
        best_of_7(cold, [&] {
          matmul_backward_weight(dw.data(), nullptr, y.data(), x.data(), N, in, out);
        })};
  const bf16 one = 0x3F80;
  std::vector<bf16> x16(x.size(), one), w16(w.size(), one), y16(y.size(), one);
  return {
      best_of_7(
          cold,
          [&] { matmul_bf16_forward(y.data(), x16.data(), w16.data(), nullptr, N, in, out); }),
      best_of_7(cold,
                [&] { matmul_bf16_backward_input(dx.data(), y16.data(), w16.data(), N, in, out); }),
      best_of_7(cold, [&] {
        matmul_bf16_backward_weight(dw.data(), nullptr, y16.data(), x16.data(), N, in, out);
      })};
}

void run_precision(const Options& o, const std::optional<HardwareProfile>& h,
                   const char* precision) {
  const bool b16 = std::string(precision) == "bf16";
  if (b16 && !bf16_matmul_supported()) {
    std::printf("bf16 skipped: no oneDNN bf16 matmul on this CPU\n");
    return;
  }
  const int C = o.dim, N = o.rows;
  for (auto [name, in, out] : {std::tuple{"qkv", C, 3 * C}, std::tuple{"proj", C, C},
                               std::tuple{"fc", C, 4 * C}, std::tuple{"mlp_proj", 4 * C, C}}) {
    const GemmTimes t = time_linear(b16, o.cold, N, in, out);
    if (!h) {
      std::printf("%s %-9s N %d in %d out %d: fwd %.3f bwd_in %.3f bwd_w %.3f ms\n", precision,
                  name, N, in, out, t.fwd * 1e3, t.bwd_in * 1e3, t.bwd_w * 1e3);
      continue;
    }
    const double model = local_gemm_seconds(
        compute_rates(*h, b16 ? Precision::bf16 : Precision::fp32, 1, 1), N, out, in);
    std::printf(
        "%s %-9s N %d in %d out %d: fwd %.3f bwd_in %.3f bwd_w %.3f ms, model %.3f ms "
        "(measured/model %.2f %.2f %.2f)\n",
        precision, name, N, in, out, t.fwd * 1e3, t.bwd_in * 1e3, t.bwd_w * 1e3, model * 1e3,
        t.fwd / model, t.bwd_in / model, t.bwd_w / model);
  }
}

}  // namespace
}  // namespace mt::plan

int main(int argc, char** argv) {
  using namespace mt::plan;
  const Options o = parse(argc, argv);
  std::optional<HardwareProfile> h;
  try {
    if (!o.profile.empty()) h = load_profile(o.profile);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_plan_gemm: error: %s\n", e.what());
    return 2;
  }
  if (!h) std::printf("no profile (--profile or MESHTRAIN_PROFILE): measured times only\n");
  omp_set_num_threads(1);
  for (const char* precision : {"fp32", "bf16"}) run_precision(o, h, precision);
  return 0;
}
