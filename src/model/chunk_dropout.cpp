#include "model/chunk_dropout.h"

#include "core/error.h"

namespace mt {

void ChunkDropout::set_microbatch(int slot, int j, int b, int T) {
  if (!enabled()) return;
  if (rows_.size() <= size_t(slot)) rows_.resize(size_t(slot) + 1);
  std::vector<int64_t>& r = rows_[size_t(slot)];
  r.resize(size_t(b) * size_t(T));
  const int64_t first = (first_sequence_ + int64_t(j) * b) * T;
  for (size_t i = 0; i < r.size(); ++i) r[i] = first + int64_t(i);
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
  const int64_t* tokens = state_.row_tokens + size_t(sp_rank_) * size_t(Nl);
  const DropoutKey key = state_.key(DropoutState::embedding_site());
  if (backward)
    dropout_backward(x, x, Nl, C, tokens, 0, key, state_.p);
  else
    dropout_forward(x, x, Nl, C, tokens, 0, key, state_.p);
}

}  // namespace mt
