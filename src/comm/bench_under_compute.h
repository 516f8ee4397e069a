// `meshtrain bench comm --under-compute`: what one small background collective adds to an
// iteration in which every rank computes, the case the idle bandwidth table cannot show.
//
// Each rank runs iterations of  GEMM; issue all_reduce(count floats); GEMM; wait,  and,
// alternating with them in the same repeat, the same iterations without the collective.
// The difference of the two medians is the collective's cost while ranks compute: the
// thread wake-ups, the context switches and the wait for the slowest peer, which a 1-float
// all-reduce on idle ranks (2-5 us) hides.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

namespace mt {

struct UnderComputeOptions {
  int ranks = 2;         // local backend
  double gemm_us = 170;  // target time of each of the two GEMMs (sized at start-up)
  size_t count = 1;      // floats all-reduced between them
  int iters = 50;        // iterations per timed repeat
  int repeats = 11;      // repeats; each runs both variants, the medians are reported
  double timeout_s = 300;
};

// The compute between the collectives, given by the caller (comm/ is below kernels/; the
// CLI passes a GEMM): size(target_us) runs on rank 0 and returns a size parameter that
// takes about target_us; make(size) builds one rank's work of that size.
struct ComputeWork {
  std::function<int(double target_us)> size;
  struct Instance {
    std::function<void()> run;
    std::string what;  // for the header line, e.g. "GEMM 256x256x208"
  };
  std::function<Instance(int size)> make;
};

// Prints the table to out; returns the exit code (0, or 1 when a check failed).
int run_under_compute_bench(const UnderComputeOptions& opts, const ComputeWork& work,
                            std::ostream& out);

}  // namespace mt
