#include "data/data_loader.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace mt {

namespace {

// Every id must index a row of the token table: the first one that does not is named
// with its place, so the user can find it (a scan of the shard, once, at load).
void check_vocab(const TokenShard& shard, int64_t vocab) {
  const int64_t bad = shard.first_token_at_least(vocab);
  MT_REQUIRE(bad < 0, "data file ", shard.path(), " holds token id ", shard.token(bad),
             " (its token ", bad, ", the first id outside the vocabulary) but the model vocab is ",
             vocab, " (ids 0..", vocab - 1, ")");
}

}  // namespace

DataLoader::DataLoader(const std::string& path, int B, int T, int dp_size, int dp_rank,
                       int microbatches)
    : DataLoader(std::vector<std::string>{path}, B, T, dp_size, dp_rank, microbatches) {}

DataLoader::DataLoader(const std::vector<std::string>& paths, int B, int T, int dp_size,
                       int dp_rank, int microbatches)
    : B_(B), T_(T), dp_size_(dp_size), dp_rank_(dp_rank), M_(microbatches) {
  MT_CHECK(!paths.empty(), "a data loader needs a shard");
  for (const std::string& p : paths) {
    shards_.emplace_back(p);
    starts_.push_back(size_);
    size_ += shards_.back().size();
  }
  const std::string& path = paths.front();
  MT_REQUIRE(B > 0 && T > 0, "batch (", B, ") and sequence length (", T, ") must be positive");
  MT_REQUIRE(dp_size > 0 && microbatches > 0, "dp (", dp_size, ") and microbatches (", microbatches,
             ") must be positive");
  MT_CHECK(dp_rank >= 0 && dp_rank < dp_size, "dp_rank ", dp_rank, " of ", dp_size);
  MT_REQUIRE(B % (dp_size * microbatches) == 0, "batch ", B,
             " must be divisible by dp * microbatches = ", dp_size, " * ", microbatches, " = ",
             dp_size * microbatches);
  b_ = B / (dp_size * microbatches);
  const int64_t need = tokens_per_batch() + 1;
  MT_REQUIRE(size_ >= need, "data file ", path,
             paths.size() > 1 ? " and the rest of its dataset" : "", " holds ", size_,
             " tokens, fewer than one batch needs (batch * seq + 1 = ", B, " * ", T,
             " + 1 = ", need, ")");
  inputs_.resize(static_cast<size_t>(M_) * b_ * T_);
  targets_.resize(inputs_.size());
  window_.resize(size_t(T_) + 1);
  positions_.resize(size_t(T_));
  for (int t = 0; t < T_; ++t) positions_[size_t(t)] = t;
}

void DataLoader::shard_sequences(std::vector<int> positions) {
  positions_ = std::move(positions);
  inputs_.assign(size_t(M_) * b_ * positions_.size(), 0);
  targets_.assign(inputs_.size(), 0);
}

void DataLoader::copy_tokens(int64_t pos, int64_t n, int32_t* out) const {
  // The shard holding pos: the last whose start is <= pos.
  size_t k = size_t(std::upper_bound(starts_.begin(), starts_.end(), pos) - starts_.begin()) - 1;
  while (n > 0) {
    const TokenShard& sh = shards_[k];
    const int64_t off = pos - starts_[k];
    const int64_t take = std::min(n, sh.size() - off);
    sh.copy(off, take, out);
    out += take;
    pos += take;
    n -= take;
    ++k;
  }
}

int64_t DataLoader::max_token_id() const {
  int64_t m = -1;
  for (const TokenShard& s : shards_) m = std::max(m, s.max_token_id());
  return m;
}

void DataLoader::shuffle_samples(uint64_t seed, const std::string& index_dir) {
  sample_index_.emplace(seed, samples(), index_dir);
  position_ = 0;
}

int64_t DataLoader::sequence_start(int64_t s) {
  if (sample_index_) return sample_index_->sample(position_ + s) * T_;
  return position_ + s * T_;
}

void DataLoader::next_batch() {
  if (!sample_index_ && position_ + tokens_per_batch() + 1 > size_) position_ = 0;
  // This rank's sequences are one consecutive run, so its microbatches (m, i) laid out
  // back to back are simply sequences first_seq + m*b + i.
  const int64_t first_seq = static_cast<int64_t>(dp_rank_) * (B_ / dp_size_);
  const int64_t nseq = static_cast<int64_t>(M_) * b_;
  const size_t rows = positions_.size();
  for (int64_t r = 0; r < nseq; ++r) {
    copy_tokens(sequence_start(first_seq + r), T_ + 1, window_.data());
    int32_t* in = inputs_.data() + size_t(r) * rows;
    int32_t* tg = targets_.data() + size_t(r) * rows;
    for (size_t t = 0; t < rows; ++t) {
      const size_t at = size_t(positions_[t]);
      in[t] = window_[at];
      tg[t] = window_[at + 1];
    }
  }
  // Over the whole global batch, in sequence order, so every rank computes the same value.
  batch_hash_ = 0x6261746368ull;  // "batch"
  for (int64_t s = 0; s < B_; ++s) batch_hash_ = mix64(batch_hash_ ^ uint64_t(sequence_start(s)));
  position_ += sample_index_ ? B_ : tokens_per_batch();
}

const int32_t* DataLoader::inputs(int j) const {
  MT_CHECK(j >= 0 && j < M_, "microbatch ", j, " of ", M_);
  return inputs_.data() + static_cast<size_t>(j) * b_ * positions_.size();
}

const int32_t* DataLoader::targets(int j) const {
  MT_CHECK(j >= 0 && j < M_, "microbatch ", j, " of ", M_);
  return targets_.data() + static_cast<size_t>(j) * b_ * positions_.size();
}

void DataLoader::set_position(int64_t position) {
  MT_REQUIRE(position >= 0 && (sample_index_ || position <= size_), "data position ", position,
             " is outside data file ", path(), " (", size_,
             " tokens); was the checkpoint made with a different data file?");
  position_ = position;
}

void DataLoader::require_vocab(int64_t vocab) const {
  for (const TokenShard& s : shards_) check_vocab(s, vocab);
}

void require_shard_vocab(const std::string& path, int64_t vocab) {
  check_vocab(TokenShard(path), vocab);
}

int vocab_of_shards(const std::vector<std::string>& paths) {
  int64_t max_id = -1;
  std::string holder;
  for (const std::string& p : paths) {
    const int64_t m = TokenShard(p).max_token_id();
    if (m > max_id) max_id = m, holder = p;
  }
  MT_REQUIRE(max_id < kMaxDataVocab, "data file ", holder, " holds token id ", max_id,
             ", beyond the largest vocabulary (--vocab at most ", kMaxDataVocab, ")");
  return int(std::max<int64_t>(256, max_id + 1));
}

}  // namespace mt
