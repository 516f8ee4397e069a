// Vocabulary parallelism: the token table (tied with the LM head) split by rows over tp.
// The layers using the split are vocab_parallel_embedding.h and
// vocab_parallel_cross_entropy.h; the full (N, V) logits never exist on one rank.
//
// The vocabulary is padded to Vp = ceil(V / t) * t so every rank holds Vp / t rows; rank r
// holds ids [r * Vp/t, (r+1) * Vp/t). Padding rows (ids >= V) are zero-initialised, get no
// gradient, are skipped by the parameter table's global view (never in a file), and their
// logit columns are excluded from the softmax: a zero row would otherwise add exp(0 - max)
// to the normaliser and change the loss (Megatron issue #1754).
#pragma once

#include <cstdint>

namespace mt::tp {

// A rank's rows fit int (at most ceil(V / t) <= V); the padded size and a padding-only
// rank's start may not, for V near 2^31: they are int64.
struct VocabShard {
  int64_t start = 0;  // first id held
  int rows = 0;       // rows held (padded)
  int real = 0;       // of which real ids (< V): the rest is padding
};

inline int64_t padded_vocab(int64_t V, int t) {
  return (V + t - 1) / t * t;
}

inline VocabShard vocab_shard(int64_t V, int t, int rank) {
  VocabShard s;
  s.rows = int(padded_vocab(V, t) / t);
  s.start = int64_t(rank) * s.rows;
  const int64_t left = V - s.start;
  s.real = left <= 0 ? 0 : int(left < s.rows ? left : s.rows);
  return s;
}

}  // namespace mt::tp
