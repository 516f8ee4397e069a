// `meshtrain bench comm`: times one collective over a range of sizes and prints an
// nccl-tests-style table (bytes, count, time, algbw, busbw).
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>

#include "comm/backend.h"

namespace mt {

enum class BenchOp { all_reduce, reduce_scatter, all_gather, all_to_all, broadcast };
const char* bench_op_name(BenchOp op);
// The flags' text, parsed once when the command line is read. UsageError `--op must be
// all_reduce, reduce_scatter, all_gather, all_to_all or broadcast (got 'x')` and `--backend
// must be local or mpi`.
BenchOp bench_op_of(const std::string& text);
Backend bench_backend_of(const std::string& text);

struct CommBenchOptions {
  Backend backend = Backend::local;  // mpi: ranks = MPI world size
  int ranks = 2;                     // local backend only
  int ranks_per_process = 1;         // mpi: > 1 is the hybrid world (hierarchical collectives)
  BenchOp op = BenchOp::all_reduce;
  size_t min_bytes = 1 << 20;   // per-rank buffer size (all_gather: the gathered size)
  size_t max_bytes = 64 << 20;  // sizes double from min to max
  int iters = 10;               // calls per timed repeat
  int repeats = 5;              // the reported time is the median repeat
  int warmup = 2;               // untimed calls per size
  bool in_place = true;
  bool check = true;             // verify the result once per size
  bool memcpy_baseline = false;  // also time a single-thread memcpy of each size
  double timeout_s = 300;
};

// Runs the benchmark and prints the table to out (only global rank 0 prints under MPI).
// argc/argv go to MPI_Init for the mpi backend. Returns the exit code (0, or 1 when the
// check failed). Bad options throw UsageError.
int run_comm_bench(const CommBenchOptions& opts, int* argc, char*** argv, std::ostream& out);

}  // namespace mt
