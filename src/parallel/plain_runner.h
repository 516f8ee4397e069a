// The plain microbatch loop: every microbatch forward + backward in turn on this rank's
// whole chunk list (no pipeline). Used by one worker and by dp, tp and ep layouts.
#pragma once

#include "model/gpt.h"
#include "parallel/microbatch_runner.h"

namespace mt {

class PlainRunner final : public MicrobatchRunner {
 public:
  // microbatches m of b sequences of T tokens each.
  PlainRunner(GPT& model, int microbatches, int b, int T);
  MicrobatchStats run(const int* tokens, const int* targets, float dloss,
                      const SpanSink& sink) override;
  double evaluate(const int* tokens, const int* targets) override;

 private:
  GPT& model_;
  int m_, b_, T_;
};

}  // namespace mt
