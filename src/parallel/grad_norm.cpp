#include "parallel/grad_norm.h"

#include "comm/rank_order_sum.h"
#include "kernels/reduce.h"

namespace mt {

double global_grad_sum_squares(DataParallel& dp, const GradNormGroups& groups,
                               std::span<const float> counted_elsewhere) {
  const LocalGradSquares local = dp.local_grad_squares();
  auto over_dp = [&](double x) { return dp.zero() == 0 ? x : dp.sum_over(x); };
  const bool tp = groups.tp && groups.tp->size() > 1;
  auto experts = [&] {
    return dp.ep() ? sum_in_rank_order(*dp.ep(), local.experts) : local.experts;
  };
  double sq;
  if (dp.has_experts() && !tp) {
    const double rest = over_dp(local.split + local.replicated);
    sq = rest + experts();
  } else if (!tp) {
    sq = over_dp(local.split + local.replicated);
  } else {
    // Separately: the split part adds up over tp, the replicated part must not. The experts
    // are replicated over tp (tokens split, moe_layer.h) and add up over ep.
    const double split = over_dp(local.split);
    const double replicated = over_dp(local.replicated);
    sq = sum_in_rank_order(*groups.tp, split) + replicated;
    if (dp.has_experts()) sq += experts();
  }
  if (!counted_elsewhere.empty()) {
    const double copy = sum_squares(counted_elsewhere.data(), counted_elsewhere.size());
    sq -= tp ? sum_in_rank_order(*groups.tp, copy) : copy;
  }
  if (groups.pp && groups.pp->size() > 1) sq = sum_in_rank_order(*groups.pp, sq);
  return sq;
}

}  // namespace mt
