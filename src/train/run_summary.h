// The run's last line on stdout (global rank 0), printed under --quiet too, so that a log of
// a quiet run still says how it ended and where its outputs went:
//   meshtrain: done: steps 1-200 | loss 3.2145 | val_loss 3.4012 (step 200) | 51234 tok/s |
//   outputs: metrics out/m.jsonl, report page out/m.html, checkpoint out/ck
// tok/s is over the steps this run took: their tokens over their summed step times.
#pragma once

#include <optional>
#include <string>

#include "train/options.h"

namespace mt {

class RunSummary {
 public:
  explicit RunSummary(int first_step) : first_step_(first_step) {}
  void step(int step, double loss, double step_time_s, double tokens_per_s,
            std::optional<double> val_loss);
  // "meshtrain: done: ..."; `report_page` is the page beside --metrics, empty when none.
  std::string line(const TrainOptions& o, const std::string& report_page) const;

 private:
  int first_step_, last_step_ = 0;
  double loss_ = 0, seconds_ = 0, tokens_ = 0;
  std::optional<double> val_loss_;
  int val_step_ = 0;
};

}  // namespace mt
