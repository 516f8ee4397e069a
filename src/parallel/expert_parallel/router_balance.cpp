#include "parallel/expert_parallel/router_balance.h"

#include "comm/rank_order_sum.h"

namespace mt {

void update_router_bias(MoeLayer& layer, Communicator* dp) {
  std::vector<int64_t> load = layer.stats().selected;
  if (dp && dp->size() > 1)
    dp->all_reduce(load.data(), load.data(), load.size(), DType::i64, ReduceOp::sum).wait();
  layer.update_router_bias(load.data());
}

MoeStepMetrics reduce_moe_metrics(const MoeLayer& layer, Communicator* dp) {
  const MoeStats& st = layer.stats();
  const int E = layer.experts();
  // One i64 buffer: loads, assignments, dropped, groups; the aux sum travels separately.
  std::vector<int64_t> v(st.load);
  v.push_back(st.assignments);
  v.push_back(st.dropped);
  v.push_back(st.groups);
  double aux = st.aux_sum;
  if (dp && dp->size() > 1) {
    dp->all_reduce(v.data(), v.data(), v.size(), DType::i64, ReduceOp::sum).wait();
    aux = sum_in_rank_order(*dp, aux);  // the same double on every rank and layout
  }
  MoeStepMetrics m;
  m.expert_load.assign(v.begin(), v.begin() + E);
  m.assignments = v[E];
  m.dropped = v[E + 1];
  m.groups = v[E + 2];
  m.aux_sum = aux;
  derive_moe_rates(m);
  return m;
}

void derive_moe_rates(MoeStepMetrics& m) {
  m.dropped_frac = m.assignments > 0 ? double(m.dropped) / double(m.assignments) : 0.0;
  m.aux_loss = m.groups > 0 ? m.aux_sum / double(m.groups) : 0.0;
}

}  // namespace mt
