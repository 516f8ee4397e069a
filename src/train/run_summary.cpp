#include "train/run_summary.h"

#include <cstdio>
#include <vector>

#include "core/error.h"

namespace mt {

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Where the run wrote, in the order the flags are usually given.
std::string outputs_of(const TrainOptions& o, const std::string& report_page) {
  const IoOptions& io = o.io;
  std::vector<std::string> outs;
  if (!io.metrics.empty()) outs.push_back("metrics " + io.metrics);
  if (!report_page.empty()) outs.push_back("report page " + report_page);
  if (!io.save.empty()) outs.push_back("checkpoint " + io.save);
  if (!io.export_path.empty()) outs.push_back("weights " + io.export_path);
  if (!io.export_hf.empty()) outs.push_back("Hugging Face directory " + io.export_hf);
  if (!io.trace.empty()) outs.push_back("trace " + io.trace);
  std::string text;
  for (size_t i = 0; i < outs.size(); ++i) text += (i ? ", " : "") + outs[i];
  return text.empty() ? "none" : text;
}

}  // namespace

void RunSummary::step(int step, double loss, double step_time_s, double tokens_per_s,
                      std::optional<double> val_loss) {
  last_step_ = step;
  loss_ = loss;
  seconds_ += step_time_s;
  tokens_ += tokens_per_s * step_time_s;
  if (val_loss) {
    val_loss_ = val_loss;
    val_step_ = step;
  }
}

std::string RunSummary::line(const TrainOptions& o, const std::string& report_page) const {
  if (last_step_ == 0)
    return str("meshtrain: done: no steps to take (already at step ", o.optim.steps,
               ") | outputs: ", outputs_of(o, report_page));
  return str("meshtrain: done: steps ", first_step_, "-", last_step_, " | loss ", fixed(loss_, 4),
             val_loss_ ? str(" | val_loss ", fixed(*val_loss_, 4), " (step ", val_step_, ")") : "",
             " | ", fixed(seconds_ > 0 ? tokens_ / seconds_ : 0, 0),
             " tok/s | outputs: ", outputs_of(o, report_page));
}

}  // namespace mt
