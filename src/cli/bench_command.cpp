// `meshtrain bench comm|cp|gemm`: measurements a user runs to know their machine.
#include <iostream>
#include <memory>

#include "cli/bench_gemm.h"
#include "cli/commands.h"
#include "cli/flag_set.h"
#include "cli/train_flags.h"
#include "cli/train_setup.h"
#include "comm/bench_comm.h"
#include "comm/bench_under_compute.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/sized_gemm.h"
#include "parallel/context_parallel/bench_context_parallel.h"

namespace mt {

namespace {

// `bench cp`'s flags (parallel/context_parallel/bench_context_parallel.h).
CLI::App* add_cp_bench(CLI::App* bench, CpBenchOptions& p) {
  CLI::App* cp = bench->add_subcommand(
      "cp", "context-parallel attention table (ring vs all-gather against one worker / cp)");
  cp->add_option("--ranks", p.ranks, "the cp size (local backend)")->capture_default_str();
  cp->add_option("--seq", p.seqs, "whole-sequence lengths (repeatable, or comma-separated)")
      ->delimiter(',')
      ->capture_default_str();
  cp->add_option("--batch", p.batch, "sequences")->capture_default_str();
  cp->add_option("--heads", p.heads, "query heads")->capture_default_str();
  cp->add_option("--kv-heads", p.kv_heads, "kv heads (the ones that travel)")
      ->capture_default_str();
  cp->add_option("--head-dim", p.head_dim, "head dim")->capture_default_str();
  cp->add_option("--comm", p.comm, "ring|allgather|both")->capture_default_str();
  cp->add_option("--threads", p.threads, "compute threads per rank")->capture_default_str();
  cp->add_option("--iters", p.iters, "steps per timed repeat")->capture_default_str();
  cp->add_option("--repeats", p.repeats, "timed repeats (the median is reported)")
      ->capture_default_str();
  return cp;
}

// bench comm: the collective table's flags, and --under-compute's.
CLI::App* add_comm_bench(CLI::App* bench, CommBenchOptions& c, UnderComputeOptions& uc,
                         bool& under_compute) {
  CLI::App* comm = bench->add_subcommand(
      "comm", "collective bandwidth table (nccl-tests style: bytes, time, algbw, busbw)");
  comm->add_option_function<std::string>(
          "--backend", [&c](const std::string& text) { c.backend = bench_backend_of(text); },
          "local|mpi")
      ->default_str("local");
  comm->add_option("--ranks", c.ranks, "ranks (local backend; MPI takes the launcher's)")
      ->capture_default_str();
  comm->add_option("--ranks-per-process", c.ranks_per_process,
                   "mpi: ranks each process runs as threads (hybrid world, hierarchical "
                   "collectives; 1 = flat MPI)")
      ->capture_default_str();
  comm->add_option_function<std::string>(
          "--op", [&c](const std::string& text) { c.op = bench_op_of(text); },
          "all_reduce|reduce_scatter|all_gather|all_to_all|broadcast")
      ->default_str("all_reduce");
  comm->add_option("--min-bytes", c.min_bytes, "smallest message")->capture_default_str();
  comm->add_option("--max-bytes", c.max_bytes, "largest message")->capture_default_str();
  comm->add_option("--iters", c.iters, "calls per timed repeat")->capture_default_str();
  comm->add_option("--repeats", c.repeats, "timed repeats per size (the median is reported)")
      ->capture_default_str();
  comm->add_flag("--memcpy", c.memcpy_baseline,
                 "also time a single-thread memcpy of each size (the bandwidth reference)");
  comm->add_flag_callback(
      "--out-of-place", [&c] { c.in_place = false; }, "separate send and receive buffers");
  comm->add_flag("--under-compute", under_compute,
                 "time what a small all_reduce adds between two GEMMs (ranks computing)");
  comm->add_option("--gemm-us", uc.gemm_us, "--under-compute: target time of each GEMM")
      ->capture_default_str();
  comm->add_option("--count", uc.count, "--under-compute: floats all-reduced")
      ->capture_default_str();
  return comm;
}

// bench comm --under-compute: the GEMMs come from kernels/ (comm/ may not include it).
int run_under_compute(const CLI::App& comm, const CommBenchOptions& c, UnderComputeOptions uc) {
  MT_REQUIRE(c.backend == Backend::local, "--under-compute needs --backend local");
  uc.ranks = c.ranks;
  if (comm.count("--iters") > 0) uc.iters = c.iters;
  if (comm.count("--repeats") > 0) uc.repeats = c.repeats;
  ComputeWork gemm_work;
  gemm_work.size = [](double us) { return SizedGemm::k_for(us); };
  gemm_work.make = [](int k) {
    auto g = std::make_shared<SizedGemm>(k);
    return ComputeWork::Instance{[g] { g->run(); }, g->describe()};
  };
  return run_under_compute_bench(uc, gemm_work, std::cout);
}

}  // namespace

CommandRunner add_bench_command(CLI::App& app, int* argc, char*** argv) {
  CLI::App* bench = app.add_subcommand(
      "bench", "micro-benchmarks (communication, context-parallel attention, GEMM peak)");
  bench->require_subcommand(1);
  auto c = std::make_shared<CommBenchOptions>();
  auto uc = std::make_shared<UnderComputeOptions>();
  auto under_compute = std::make_shared<bool>(false);
  CLI::App* comm = add_comm_bench(bench, *c, *uc, *under_compute);
  auto p = std::make_shared<CpBenchOptions>();
  CLI::App* cp = add_cp_bench(bench, *p);
  auto step_opts = std::make_shared<TrainOptions>();
  auto step_flags = std::make_shared<FlagSet>();
  CLI::App* step = bench->add_subcommand(
      "step", "train with `meshtrain train`'s flags, then print where the step's time went");
  step->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  step->add_flag("--breakdown", step_opts->engine.breakdown,
                 "per-phase profile of rank 0's steps next to each phase's roofline time");
  define_train_flags(*step_flags, *step_opts);
  step_flags->register_cli(*step);
  auto gemm_opts = std::make_shared<GemmBenchOptions>();
  auto gemm_flags = std::make_shared<FlagSet>();
  CLI::App* gemm = add_gemm_bench(bench, *gemm_flags, *gemm_opts);
  return [=]() -> int {
    if (comm->parsed() && *under_compute) return run_under_compute(*comm, *c, *uc);
    if (comm->parsed()) return run_comm_bench(*c, argc, argv, std::cout);
    if (cp->parsed()) return run_cp_bench(*p, std::cout);
    if (step->parsed()) {
      step_flags->check_values();
      step_opts->vocab_given = step_flags->given("vocab");
      step_opts->seq_given = step_flags->given("seq");
      return run_training(*step_opts, argc, argv);
    }
    if (gemm->parsed()) return run_gemm_bench(*gemm_flags, *gemm_opts, std::cout);
    return 2;
  };
}

}  // namespace mt
