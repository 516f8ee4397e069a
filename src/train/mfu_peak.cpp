#include "train/mfu_peak.h"

#include <utility>

namespace mt {

std::shared_ptr<const MfuPeak> MfuPeak::given(double gflops_per_thread) {
  std::shared_ptr<MfuPeak> p(new MfuPeak(nullptr));
  p->figure_ = {gflops_per_thread, "GEMM peak " + std::to_string(gflops_per_thread) +
                                       " GFLOP/s per thread (given by --peak-gflops)"};
  return p;
}

std::shared_ptr<const MfuPeak> MfuPeak::on_first_read(std::function<Figure()> measure) {
  return std::shared_ptr<const MfuPeak>(new MfuPeak(std::move(measure)));
}

const MfuPeak::Figure& MfuPeak::read() const {
  if (measure_) std::call_once(once_, [this] { figure_ = measure_(); });
  return figure_;
}

bool run_reads_mfu(const TrainOptions& o) {
  const bool progress = !o.io.quiet && o.io.progress != ProgressMode::none;
  return progress || !o.io.metrics.empty() || o.engine.breakdown;
}

}  // namespace mt
