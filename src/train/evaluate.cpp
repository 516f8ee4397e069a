#include "train/evaluate.h"

#include "core/error.h"

namespace mt {

double evaluate(Session& s) {
  MT_CHECK(s.val.has_value(), "evaluate without validation data");
  DataLoader& loader = *s.val;
  const int batches = s.opts.optim.eval_batches;
  s.moe_metrics.set_recording(false);
  loader.reset();
  s.model.weights_changed();  // the step before changed them
  double sum = 0;
  for (int k = 0; k < batches; ++k) {
    loader.next_batch();
    sum += s.runner->evaluate(loader.inputs(0), loader.targets(0));
  }
  // Over dp the replicas' shares, over a pipeline the last stage's sum.
  const double total = s.runner->sum_over_group(s.dp.sum_over(sum));
  s.dp.release_params();
  s.moe_metrics.set_recording(true);
  return total / (double(batches) * loader.tokens_per_batch());
}

}  // namespace mt
