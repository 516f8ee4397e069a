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
    float aux_f = float(aux);
    dp->all_reduce(&aux_f, &aux_f, 1, DType::f32, ReduceOp::sum).wait();
    aux = aux_f;
  }
  MoeStepMetrics m;
  m.expert_load.assign(v.begin(), v.begin() + E);
  m.dropped_frac = v[E] > 0 ? double(v[E + 1]) / double(v[E]) : 0.0;
  m.aux_loss = v[E + 2] > 0 ? aux / double(v[E + 2]) : 0.0;
  return m;
}

}  // namespace mt
