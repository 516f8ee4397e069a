#include "model/moe_parts.h"

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "model/moe_part_sizes.h"

namespace mt {

MoeParts::MoeParts(int parts, int ranks, int El, int k, int max_rows, SlotLayout& layout)
    : P_(parts), ranks_(ranks), El_(El), k_(k) {
  MT_CHECK(P_ >= 1, "MoE overlap parts ", P_, " < 1");
  const size_t E = size_t(ranks) * El, M = size_t(max_rows) * k;
  off_.send = layout.reserve(P_ * E);
  off_.recv = layout.reserve(P_ * E);
  off_.row_of = layout.reserve(M);
  expert_cursor_.resize(P_ * E);
  offset_.resize(El + 1);
  bounds_.resize(P_ + 1);
  counts_out_.resize(P_ * E), counts_in_.resize(P_ * E);
}

// Part p starts at its first unit (moe_part_sizes.h says why the first and the last parts
// are the small ones) of rows / units, rounded down.
int MoeParts::token_begin(int p, int rows) const {
  return int(int64_t(moe_part_unit_begin(P_, p)) * rows / moe_part_units(P_));
}

// Parts are runs of consecutive tokens, part p holding tokens [token_begin(p),
// token_begin(p + 1)); the rows keep their expert-sorted order inside a part.
const int32_t* MoeParts::plan(float* s, const int32_t* row_token, const int32_t* row_of,
                              const int32_t* send_counts, int rows, int M, TokenExchange& x) {
  const int E = ranks_ * El_;
  for (int p = 0; p <= P_; ++p) bounds_[p] = token_begin(p, rows);
  // The last part whose first token is at or before t: empty parts (rows < 2P - 2) get none.
  const auto part = [&](int32_t t) {
    return int(std::upper_bound(bounds_.begin(), bounds_.end(), t) - bounds_.begin()) - 1;
  };
  // Sized at the first use, not at construction: a dry run (dry_model.h) builds the layer
  // for its sizes only.
  if (part_row_token_.size() < size_t(M)) part_row_token_.resize(M), pm_pos_.resize(M);
  // Count: rows per (part, expert).
  int32_t* send = ints(s, off_.send);
  std::fill(send, send + P_ * E, 0);
  for (int e = 0, i = 0; e < E; ++e)
    for (int32_t r = 0; r < send_counts[e]; ++r, ++i) ++send[part(row_token[i]) * E + e];
  // Place: each (part, expert) block's first part-major row, then every row's.
  for (int b = 0, next = 0; b < P_ * E; ++b) expert_cursor_[b] = next, next += send[b];
  for (int e = 0, i = 0; e < E; ++e)
    for (int32_t r = 0; r < send_counts[e]; ++r, ++i) {
      const int32_t pos = expert_cursor_[part(row_token[i]) * E + e]++;
      pm_pos_[i] = pos;
      part_row_token_[pos] = row_token[i];
    }
  MT_CHECK(M == 0 || pm_pos_[M - 1] < M, "MoE parts: rows beyond the kept ", M);
  int32_t* pm_row_of = ints(s, off_.row_of);
  for (int64_t a = 0; a < int64_t(rows) * k_; ++a)
    pm_row_of[a] = row_of[a] < 0 ? -1 : pm_pos_[row_of[a]];
  start_part_counts(s, x);
  return part_row_token_.data();
}

// One count exchange for every part: to rank d go (P, El) counts, part-major.
void MoeParts::start_part_counts(float* s, TokenExchange& x) {
  const int E = ranks_ * El_;
  const int32_t* send = ints(s, off_.send);
  for (int d = 0; d < ranks_; ++d)
    for (int p = 0; p < P_; ++p)
      for (int le = 0; le < El_; ++le)
        counts_out_[(d * P_ + p) * El_ + le] = send[p * E + d * El_ + le];
  counts_ = x.start_exchange_counts(counts_out_.data(), counts_in_.data(), P_ * El_);
}

// The backward pass finds none pending: it reuses the forward's counts, kept in its slot.
void MoeParts::finish_part_counts(float* s) {
  if (!counts_) return;
  counts_->finish();
  counts_.reset();
  const int E = ranks_ * El_;
  int32_t* recv = ints(s, off_.recv);
  for (int src = 0; src < ranks_; ++src)
    for (int p = 0; p < P_; ++p)
      for (int le = 0; le < El_; ++le)
        recv[p * E + src * El_ + le] = counts_in_[(src * P_ + p) * El_ + le];
}

ExchangeCounts MoeParts::counts(float* s, int p) const {
  const int E = ranks_ * El_;
  return {ints(s, off_.send) + p * E, ints(s, off_.recv) + p * E, El_};
}

MoeParts::Span MoeParts::send_span(float* s, int p) const {
  const int E = ranks_ * El_;
  const int32_t* send = ints(s, off_.send);
  Span span;
  for (int b = 0; b < (p + 1) * E; ++b) (b < p * E ? span.begin : span.rows) += send[b];
  return span;
}

// Regions in reverse part order: part P-1's rows first.
MoeParts::Span MoeParts::recv_span(float* s, int p) const {
  const int E = ranks_ * El_;
  const int32_t* recv = ints(s, off_.recv);
  Span span;
  for (int b = p * E; b < P_ * E; ++b) (b < (p + 1) * E ? span.rows : span.begin) += recv[b];
  return span;
}

ExpertGroups MoeParts::groups(float* s, int p) {
  const ExchangeCounts c = counts(s, p);
  offset_[0] = int32_t(recv_span(s, p).begin);
  for (int le = 0; le < El_; ++le) {
    int32_t r = 0;
    for (int src = 0; src < ranks_; ++src) r += c.recv[src * El_ + le];
    offset_[le + 1] = offset_[le] + r;
  }
  return {offset_.data(), El_};
}

void MoeParts::run(float* s, TokenExchange& x, float* rows, float* in, float* out, float* staging,
                   int width, const Stages& stages) {
  const size_t w = size_t(width);
  const auto dispatch = [&](int p) {
    const Span m = send_span(s, p), r = recv_span(s, p);
    return x.start_dispatch(in + r.begin * w, rows + m.begin * w, staging + r.begin * w,
                            counts(s, p), width);
  };
  // Phases: part 0's rows, while the counts travel; part 1's, while part 0's travel, and
  // part 1's start too; the other parts' rows and the local work while both travel. Then
  // part p's rows arrive; part p+2's start travelling; the experts compute part p while
  // part p+1's (and part p-1's results) travel; part p's results start back. Two
  // dispatches ahead, not one: part 1's rows (twice part 0's) then travel under the local
  // work as well as under part 0's experts, and a link that serves the exchanges in order
  // is never idle while a dispatch is still to come. Last, each part's results as they
  // come in, the earlier ones while the last travels.
  stages.prepare(0);
  finish_part_counts(s);
  std::vector<std::unique_ptr<PendingExchange>> arriving(P_), back(P_);
  arriving[0] = dispatch(0);
  for (int p = 1; p < P_; ++p) {
    stages.prepare(p);
    if (p == 1) arriving[1] = dispatch(1);
  }
  stages.local.run_first();
  for (int p = 0; p < P_; ++p) {
    arriving[p]->finish();
    if (p + 2 < P_) arriving[p + 2] = dispatch(p + 2);
    stages.compute(groups(s, p));
    const Span m = send_span(s, p), r = recv_span(s, p);
    back[p] = x.start_combine(rows + m.begin * w, out + r.begin * w, staging + r.begin * w,
                              counts(s, p), width);
  }
  stages.local.run_last();
  for (int p = 0; p < P_; ++p) {
    back[p]->finish();
    stages.complete(p);
  }
}

void MoeParts::for_each_part(float* s, const Compute& compute) {
  for (int p = 0; p < P_; ++p) compute(groups(s, p));
}

}  // namespace mt
