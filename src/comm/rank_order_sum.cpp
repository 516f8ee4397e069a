#include "comm/rank_order_sum.h"

namespace mt {

std::vector<double> gather_doubles(Communicator& group, double x) {
  std::vector<double> all(size_t(group.size()));
  group.all_gather(&x, all.data(), sizeof(double), DType::u8).wait();
  return all;
}

double sum_in_rank_order(Communicator& group, double x) {
  if (group.size() == 1) return x;
  double sum = 0;
  for (double v : gather_doubles(group, x)) sum += v;
  return sum;
}

}  // namespace mt
