#include "model/chunk_dropout.h"

#include "core/error.h"

namespace mt {

void ChunkDropout::set_microbatch(int slot, int j, int b, int T) {
  if (!enabled()) return;
  if (rows_.size() <= size_t(slot)) rows_.resize(size_t(slot) + 1);
  std::vector<int64_t>& r = rows_[size_t(slot)];
  r.resize(size_t(b) * size_t(T));
  MT_CHECK(state_.seq_len >= T, "dropout: rows of ", T, " in a sequence of ", state_.seq_len);
  const int64_t first = first_sequence_ + int64_t(j) * b;
  for (int i = 0; i < b; ++i)
    for (int t = 0; t < T; ++t)
      r[size_t(i) * T + t] = (first + i) * state_.seq_len + (positions_ ? positions_[t] : t);
}

void ChunkDropout::activate(int slot, bool training) {
  state_.row_tokens = nullptr;
  if (!enabled() || !training) return;
  MT_CHECK(size_t(slot) < rows_.size() && !rows_[size_t(slot)].empty(), "dropout: slot ", slot,
           " trains without its microbatch's tokens");
  state_.row_tokens = rows_[size_t(slot)].data();
}

void ChunkDropout::embedding(float* x, int N, int C, bool backward) const {
  if (!state_.on()) return;
  const int Nl = N / sp_ranks_;
  state_.rows(x, x, DropoutState::embedding_site(), Nl, C, sp_rank_ * Nl, backward);
}

}  // namespace mt
