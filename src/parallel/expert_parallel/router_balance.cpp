#include "parallel/expert_parallel/router_balance.h"

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
    // Communicators carry no f64: the doubles travel as bytes and are added in rank order,
    // so every rank (and every layout) gets the same sum to the last bit.
    std::vector<double> all(size_t(dp->size()));
    dp->all_gather(&aux, all.data(), sizeof(double), DType::u8).wait();
    aux = 0;
    for (double x : all) aux += x;
  }
  MoeStepMetrics m;
  m.expert_load.assign(v.begin(), v.begin() + E);
  m.assignments = v[E];
  m.dropped = v[E + 1];
  m.groups = v[E + 2];
  m.aux_sum = aux;
  m.dropped_frac = m.assignments > 0 ? double(m.dropped) / double(m.assignments) : 0.0;
  m.aux_loss = m.groups > 0 ? aux / double(m.groups) : 0.0;
  return m;
}

}  // namespace mt
