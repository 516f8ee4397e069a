#include "parallel/data_parallel/piece_squares.h"

#include <algorithm>

#include "kernels/reduce.h"

namespace mt {

PieceSquares::PieceSquares(std::vector<Piece> pieces)
    : pieces_(std::move(pieces)), sq_(pieces_.size(), 0.0), done_(pieces_.size(), 0) {}

std::vector<PieceSquares::Piece> PieceSquares::in_buckets(
    const FlatLayout& layout, const std::vector<std::pair<size_t, size_t>>& pieces, bool early) {
  std::vector<Piece> out;
  for (const auto& [off, n] : pieces) {
    int bucket = -1;
    for (size_t b = 0; early && bucket < 0 && b < layout.buckets().size(); ++b)
      if (layout.buckets()[b].flat_lo <= off && off + n <= layout.buckets()[b].flat_hi)
        bucket = int(b);
    out.push_back({off, n, bucket});
  }
  return out;
}

void PieceSquares::begin_step() {
  forget_all();
  early_ = 0;
}

bool PieceSquares::square_next(const float* grads, const std::vector<char>& reduced) {
  // Buckets come back in backward order (the last blocks first), so the ready pieces are
  // mostly at the end of the table: scan from there. A model has tens to a few thousand
  // pieces, and one piece is squared per call, between two tests of the wait.
  for (size_t i = pieces_.size(); i-- > 0;) {
    const Piece& p = pieces_[i];
    if (done_[i] || p.bucket < 0 || !reduced[size_t(p.bucket)]) continue;
    sq_[i] = sum_squares(grads + p.grad_off, p.n);
    done_[i] = 1;
    early_ += p.n;
    return true;
  }
  return false;
}

const std::vector<double>& PieceSquares::sums(const float* grads) {
  // The pieces no wait squared, in one OpenMP team (a team per piece was ~50 starts a
  // step); sum_squares_each gives each the bits sum_squares does (kernels/reduce.h).
  std::vector<size_t> rest;
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (!done_[i]) rest.push_back(i);
  std::vector<const float*> x(rest.size());
  std::vector<size_t> n(rest.size());
  std::vector<double> sums(rest.size());
  for (size_t k = 0; k < rest.size(); ++k)
    x[k] = grads + pieces_[rest[k]].grad_off, n[k] = pieces_[rest[k]].n;
  sum_squares_each(x.data(), n.data(), rest.size(), sums.data());
  for (size_t k = 0; k < rest.size(); ++k) sq_[rest[k]] = sums[k], done_[rest[k]] = 1;
  return sq_;
}

void PieceSquares::forget_all() {
  std::fill(done_.begin(), done_.end(), 0);
}

}  // namespace mt
