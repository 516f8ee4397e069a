#include "parallel/data_parallel/replica_sync.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace mt {

bool parse_dp_sync(const std::string& text, DpSync* out) {
  if (text == "every-step") {
    *out = DpSync{};
    return true;
  }
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  const std::string kind = text.substr(0, colon);
  DpSync d;
  if (kind == "local")
    d.kind = DpSync::Kind::local;
  else if (kind == "diloco")
    d.kind = DpSync::Kind::diloco;
  else
    return false;
  const char* b = text.data() + colon + 1;
  const char* e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, d.period);
  if (ec != std::errc() || p != e || b == e || d.period < 1) return false;
  *out = d;
  return true;
}

DpSync dp_sync_from_flag(const std::string& text) {
  DpSync d;
  MT_REQUIRE(parse_dp_sync(text, &d),
             "--dp-sync must be every-step, local:H or diloco:H with H >= 1 (got '", text, "')");
  return d;
}

std::string dp_sync_text(const DpSync& d) {
  switch (d.kind) {
    case DpSync::Kind::every_step:
      return "every-step";
    case DpSync::Kind::local:
      return "local:" + std::to_string(d.period);
    case DpSync::Kind::diloco:
      return "diloco:" + std::to_string(d.period);
  }
  return "every-step";
}

ReplicaSync::ReplicaSync(const DpSync& mode, double outer_lr, double outer_momentum, int last_step)
    : mode_(mode), outer_lr_(outer_lr), outer_momentum_(outer_momentum), last_step_(last_step) {}

bool ReplicaSync::local_step(int step) const {
  switch (mode_.kind) {
    case DpSync::Kind::every_step:
      return false;
    case DpSync::Kind::local:
      return !sync_due(step);
    case DpSync::Kind::diloco:
      return true;
  }
  return false;
}

void ReplicaSync::before_step(DataParallel& dp, int step) {
  if (!enabled()) return;
  dp.set_local_gradients(local_step(step));
  // DiLoCo's anchor: the weights every replica starts from (the first step's, then each
  // synchronisation's result).
  if (mode_.kind == DpSync::Kind::diloco && anchor_.empty()) {
    MT_CHECK(dp.zero() == 0, "--dp-sync diloco needs --zero 0");
    const size_t n = dp.layout().flat_size();
    anchor_.assign(dp.param_storage(), dp.param_storage() + n);
    momentum_.assign(n, 0.0f);
  }
}

void ReplicaSync::local_gradients(DataParallel& dp, int step) {
  if (!enabled() || !local_step(step)) return;
  // Summed over the replica's cp ranks (if any), scaled by the batch over all replicas.
  const int n = dp.replica_group().size();
  if (n > 1) dp.scale_grads(static_cast<float>(n));
}

bool ReplicaSync::after_step(DataParallel& dp, int step) {
  if (!enabled()) return false;
  if (local_step(step)) ++local_since_sync_;
  if (!sync_due(step)) return false;
  Communicator& group = dp.replica_group();
  const bool drifted = local_since_sync_ > 0;
  local_since_sync_ = 0;
  // Replicas that took no local step since the last average are identical already:
  // averaging them could only round (local:1 stays every-step exactly).
  if (!drifted || group.size() == 1) return false;
  MT_CHECK(dp.zero() == 0, "--dp-sync needs --zero 0");
  float* p = dp.param_storage();
  const size_t n = dp.layout().flat_size();
  group.all_reduce(p, p, n, DType::f32, ReduceOp::avg).wait();
  if (mode_.kind == DpSync::Kind::diloco) {
    outer_finite_ =
        diloco_outer_step(anchor_.data(), momentum_.data(), p, n, static_cast<float>(outer_lr_),
                          static_cast<float>(outer_momentum_));
    last_outer_step_ = step;
  }
  return true;
}

std::string ReplicaSync::divergence_hint() const {
  if (mode_.kind != DpSync::Kind::diloco || last_outer_step_ == 0) return "";
  return str(" (under --dp-sync diloco the weights also moved by the outer step, last at step ",
             last_outer_step_, " with --outer-lr ", outer_lr_, ": try a lower --outer-lr too)");
}

bool diloco_outer_step(float* anchor, float* momentum, float* weights, size_t n, float lr,
                       float mu) {
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    const float delta = anchor[i] - weights[i];  // the outer "gradient"
    momentum[i] = mu * momentum[i] + delta;
    anchor[i] -= lr * (delta + mu * momentum[i]);
    weights[i] = anchor[i];
    finite &= std::isfinite(anchor[i]) && std::isfinite(momentum[i]);
  }
  return finite;
}

}  // namespace mt
