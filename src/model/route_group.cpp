#include "model/route_group.h"

#include <algorithm>

#include "core/error.h"
#include "model/zigzag_layout.h"

namespace mt {

RouteGroup::RouteGroup(const TensorParallelShard& tp, const ContextParallelShard& cp, int seq_rows)
    : tp_(tp), cp_(cp), seq_rows_(seq_rows) {
  MT_CHECK(seq_rows >= 1, "a route group needs the rows of a sequence (got ", seq_rows, ")");
  MT_CHECK(cp.size == 1 || cp.comm, "cp ", cp.size, " without a communicator");
  positions_ =
      cp.size > 1 ? zigzag_positions(seq_rows * cp.size, cp.size, cp.rank) : std::vector<int>();
}

// Row m of the cp rank's rows is position positions_[m % seq_rows] of sequence
// m / seq_rows; this rank routes the cp rank's run tp.rank (moe_layer.h).
std::vector<RouteGroup::Segment> RouteGroup::segments(int rows) const {
  const int64_t run = tp_.size > 1 ? int64_t(tp_.rank) * rows : 0;
  const int64_t T = int64_t(seq_rows_) * cp_.size;
  auto token = [&](int64_t m) {
    const int64_t i = m % seq_rows_;
    return (m / seq_rows_) * T + (positions_.empty() ? i : positions_[size_t(i)]);
  };
  std::vector<Segment> out;
  for (int n = 0; n < rows; ++n) {
    const int64_t t = token(run + n);
    if (out.empty() || t != token(run + n - 1) + 1) {
      if (!out.empty()) out.back().end = n;
      out.push_back({t, rows});
    }
  }
  return out;
}

// Without cp the rows of consecutive sequences follow each other: one run. With cp a run of
// rows crosses a chunk (T / 2cp rows) boundary at most every chunk, plus its two ends.
int RouteGroup::max_segments(int rows) const {
  if (cp_.size == 1) return 1;
  const int chunk = std::max(1, seq_rows_ / 2);
  return std::min(rows, (rows - 1) / chunk + 2);
}

std::vector<double> RouteGroup::gather(std::vector<double> mine) const {
  WaitedAtOnce at_once;
  for (const auto& [comm, size] : {std::pair{tp_.comm, tp_.size}, {cp_.comm, cp_.size}}) {
    if (size == 1) continue;
    std::vector<double> all(mine.size() * size_t(size));
    comm->all_gather(mine.data(), all.data(), mine.size() * sizeof(double), DType::u8).wait();
    mine = std::move(all);
  }
  return mine;  // tp's members inside cp's: group rank cp.rank * tp.size + tp.rank
}

void RouteGroup::sum(RouteSums& out, const int32_t* experts, const float* scores, int rows, int E,
                     int k, RouterScore score) const {
  // This rank's record: segment count, then per segment (first token, counts (E)) up to the
  // bound, then the score shares (E).
  const std::vector<Segment> segs = segments(rows);
  const size_t S = size_t(max_segments(rows)), per_seg = 1 + size_t(E), shares_at = 1 + S * per_seg;
  MT_CHECK(segs.size() <= S, "route group: ", segs.size(), " segments, bounded by ", S);
  std::vector<double> mine(shares_at + E, 0.0);
  mine[0] = double(segs.size());
  std::vector<int64_t> c(E);
  for (size_t s = 0; s < segs.size(); ++s) {
    const int32_t begin = s == 0 ? 0 : segs[s - 1].end;
    router_choice_counts(c.data(), experts + size_t(begin) * k, segs[s].end - begin, E, k);
    double* rec = mine.data() + 1 + s * per_seg;
    rec[0] = double(segs[s].first);
    for (int e = 0; e < E; ++e) rec[1 + e] = double(c[e]);
  }
  router_share_sums(mine.data() + shares_at, scores, rows, E, score);

  const std::vector<double> all = shared() ? gather(mine) : mine;
  const size_t per = mine.size(), ranks = all.size() / per;
  const size_t me = shared() ? size_t(cp_.rank) * tp_.size + tp_.rank : 0;
  out.counts.assign(E, 0);
  out.shares.assign(E, 0.0);
  out.held.assign(shared() ? segs.size() * E : 0, 0);
  out.segment_end.clear();
  if (shared())
    for (const Segment& s : segs) out.segment_end.push_back(s.end);
  for (size_t r = 0; r < ranks; ++r) {
    const double* theirs = all.data() + r * per;
    for (int e = 0; e < E; ++e) out.shares[e] += theirs[shares_at + e];
    for (size_t t = 0; t < size_t(theirs[0]); ++t) {
      const double* rec = theirs + 1 + t * per_seg;
      for (int e = 0; e < E; ++e) out.counts[e] += int64_t(rec[1 + e]);
      if (r == me) continue;
      // Another rank's segment before one of mine: its choices come first in token order.
      for (size_t s = 0; s < segs.size(); ++s)
        if (int64_t(rec[0]) < segs[s].first)
          for (int e = 0; e < E; ++e) out.held[s * E + e] += int64_t(rec[1 + e]);
    }
  }
}

}  // namespace mt
