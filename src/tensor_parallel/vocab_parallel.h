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

namespace mt::tp {

struct VocabShard {
  int start = 0;  // first id held
  int rows = 0;   // rows held (padded)
  int real = 0;   // of which real ids (< V): the rest is padding
};

inline int padded_vocab(int V, int t) {
  return (V + t - 1) / t * t;
}

inline VocabShard vocab_shard(int V, int t, int rank) {
  VocabShard s;
  s.rows = padded_vocab(V, t) / t;
  s.start = rank * s.rows;
  const int left = V - s.start;
  s.real = left <= 0 ? 0 : (left < s.rows ? left : s.rows);
  return s;
}

}  // namespace mt::tp
