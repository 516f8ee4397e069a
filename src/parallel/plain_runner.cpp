#include "parallel/plain_runner.h"

#include <string>

#include "core/timer.h"

namespace mt {

PlainRunner::PlainRunner(GPT& model, int microbatches, int b, int T)
    : model_(model), m_(microbatches), b_(b), T_(T) {}

MicrobatchStats PlainRunner::run(const int* tokens, const int* targets, float dloss,
                                 const SpanSink& sink) {
  MicrobatchStats st;
  const double t0 = now_seconds();
  const size_t rows = size_t(b_) * T_;
  for (int j = 0; j < m_; ++j) {
    const double begin = now_seconds();
    model_.set_dropout_microbatch(j);
    st.loss_sum += model_.train_microbatch(tokens + j * rows, targets + j * rows, b_, T_, dloss);
    if (sink) sink("F+B mb" + std::to_string(j), "compute", begin, now_seconds());
  }
  st.step_seconds = st.busy_seconds = now_seconds() - t0;
  return st;
}

double PlainRunner::evaluate(const int* tokens, const int* targets) {
  const size_t rows = size_t(b_) * T_;
  double sum = 0;
  for (int j = 0; j < m_; ++j)
    sum += model_.eval_microbatch(tokens + j * rows, targets + j * rows, b_, T_);
  return sum;
}

}  // namespace mt
