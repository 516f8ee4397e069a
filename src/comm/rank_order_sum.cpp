#include "comm/rank_order_sum.h"

namespace mt {

std::vector<double> gather_doubles(Communicator& group, double x) {
  std::vector<double> all(size_t(group.size()));
  group.all_gather(&x, all.data(), sizeof(double), DType::u8).wait();
  return all;
}

double sum_in_rank_order(Communicator& group, double x) {
  return RankOrderSum(group, x).finish();
}

RankOrderSum::RankOrderSum(Communicator& group, double x)
    : n_(size_t(group.size())), buf_(new double[n_ + 1]) {
  buf_[0] = x;
  if (n_ > 1) work_ = group.all_gather(&buf_[0], &buf_[1], sizeof(double), DType::u8);
}

RankOrderSum::~RankOrderSum() {
  if (!buf_) return;
  try {
    work_.wait();
  } catch (...) {
  }
}

// The same additions as sum_in_rank_order, so the same bits.
double RankOrderSum::finish() {
  if (!buf_) return 0;
  if (n_ == 1) return buf_[0];
  work_.wait();
  double sum = 0;
  for (size_t i = 1; i <= n_; ++i) sum += buf_[i];
  return sum;
}

}  // namespace mt
