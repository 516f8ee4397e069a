#include "train/data_loader.h"

#include "core/error.h"

namespace mt {

namespace {

void check_vocab(const std::string& path, int max_id, int vocab) {
  MT_REQUIRE(max_id < vocab, "data file ", path, " holds token id ", max_id,
             " but the model vocab is ", vocab);
}

}  // namespace

DataLoader::DataLoader(const std::string& path, int B, int T, int dp_size, int dp_rank,
                       int microbatches)
    : shard_(path), B_(B), T_(T), dp_size_(dp_size), dp_rank_(dp_rank), M_(microbatches) {
  MT_REQUIRE(B > 0 && T > 0, "batch (", B, ") and sequence length (", T, ") must be positive");
  MT_REQUIRE(dp_size > 0 && microbatches > 0, "dp (", dp_size, ") and microbatches (", microbatches,
             ") must be positive");
  MT_CHECK(dp_rank >= 0 && dp_rank < dp_size, "dp_rank ", dp_rank, " of ", dp_size);
  MT_REQUIRE(B % (dp_size * microbatches) == 0, "batch ", B,
             " must be divisible by dp * microbatches = ", dp_size, " * ", microbatches, " = ",
             dp_size * microbatches);
  b_ = B / (dp_size * microbatches);
  const int64_t need = tokens_per_batch() + 1;
  MT_REQUIRE(shard_.size() >= need, "data file ", path, " holds ", shard_.size(),
             " tokens, fewer than one batch needs (batch * seq + 1 = ", B, " * ", T,
             " + 1 = ", need, ")");
  inputs_.resize(static_cast<size_t>(M_) * b_ * T_);
  targets_.resize(inputs_.size());
}

void DataLoader::next_batch() {
  if (position_ + tokens_per_batch() + 1 > shard_.size()) position_ = 0;
  const uint16_t* tok = shard_.tokens();
  // This rank's sequences are one consecutive run, so its microbatches (m, i) laid out
  // back to back are simply sequences first_seq + m*b + i.
  const int64_t first_seq = static_cast<int64_t>(dp_rank_) * (B_ / dp_size_);
  const int64_t nseq = static_cast<int64_t>(M_) * b_;
  for (int64_t r = 0; r < nseq; ++r) {
    const uint16_t* src = tok + position_ + (first_seq + r) * T_;
    int32_t* in = inputs_.data() + r * T_;
    int32_t* tg = targets_.data() + r * T_;
    for (int t = 0; t < T_; ++t) {
      in[t] = src[t];
      tg[t] = src[t + 1];
    }
  }
  position_ += tokens_per_batch();
}

const int32_t* DataLoader::inputs(int j) const {
  MT_CHECK(j >= 0 && j < M_, "microbatch ", j, " of ", M_);
  return inputs_.data() + static_cast<size_t>(j) * b_ * T_;
}

const int32_t* DataLoader::targets(int j) const {
  MT_CHECK(j >= 0 && j < M_, "microbatch ", j, " of ", M_);
  return targets_.data() + static_cast<size_t>(j) * b_ * T_;
}

void DataLoader::set_position(int64_t position) {
  MT_REQUIRE(position >= 0 && position <= shard_.size(), "data position ", position,
             " is outside data file ", shard_.path(), " (", shard_.size(),
             " tokens); was the checkpoint made with a different data file?");
  position_ = position;
}

void DataLoader::require_vocab(int vocab) const {
  check_vocab(shard_.path(), shard_.max_token_id(), vocab);
}

void require_shard_vocab(const std::string& path, int vocab) {
  TokenShard shard(path);
  check_vocab(path, shard.max_token_id(), vocab);
}

}  // namespace mt
