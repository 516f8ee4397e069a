// The denominator of mfu: the per-thread GEMM peak (kernels/gemm_peak.h), given by
// --peak-gflops or measured. Measuring takes 0.3-0.6 s, and only the progress lines, the
// metrics file and the step breakdown read mfu, so a run measures it at its first read, not
// at start-up: the first step does not wait for it, and a run whose mfu nothing reads
// (--quiet or --progress none, no --metrics, no --breakdown) never measures it.
//
// One per process: the rank threads of the local backend hold copies of one MfuPeak and
// share its one measurement (the first reader measures, the others wait for its figure).
// train_step reads it at the end of the run's first step, between two barriers of every rank,
// so the measurement runs while the ranks are idle, as it did before any rank started.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "train/options.h"

namespace mt {

class MfuPeak {
 public:
  struct Figure {
    double gflops_per_thread = 0;
    std::string method;  // how it was obtained, for the step breakdown's header
  };

  // The user's figure: nothing to measure.
  static std::shared_ptr<const MfuPeak> given(double gflops_per_thread);
  // Measured by `measure` at the first read().
  static std::shared_ptr<const MfuPeak> on_first_read(std::function<Figure()> measure);

  // Thread-safe; the first call measures.
  const Figure& read() const;
  bool needs_measuring() const { return static_cast<bool>(measure_); }

 private:
  explicit MfuPeak(std::function<Figure()> measure) : measure_(std::move(measure)) {}

  std::function<Figure()> measure_;  // empty for a given figure
  mutable std::once_flag once_;
  mutable Figure figure_;
};

// Whether anything of the run reads mfu (the same answer on every rank).
bool run_reads_mfu(const TrainOptions& o);

}  // namespace mt
