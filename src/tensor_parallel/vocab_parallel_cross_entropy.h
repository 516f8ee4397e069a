// Cross-entropy over vocabulary-sharded logits (vocab_parallel.h), without ever assembling
// a full (N, V) row on any rank. Per row n (x = this rank's logits, real columns only):
//   m   = max over ranks of max(x)                     all-reduce (max) of N floats
//   s   = sum over ranks of sum(exp(x - m))  \         one all-reduce (sum) of 2N floats
//   x_t = the target's logit, from its owner  /        (the others add 0)
//   loss = log(s) + m - x_t;  dlogits = dloss * (exp(x - m) / s - onehot(target))
// The loss gradient is produced with the loss (the logits are overwritten in place), so
// this is forward and backward in one call.
#pragma once

#include "comm/communicator.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt::tp {

// losses (N) = cross-entropy of targets (N) given this rank's logits (N, shard.rows); with
// dloss != 0 the logits are overwritten with their gradient (padding columns 0).
// stats: scratch of 3N floats. With no tp group this is the one-worker kernel itself.
void vocab_parallel_crossentropy(float* losses, float* logits, const int* targets, float dloss,
                                 int N, const VocabShard& shard, Communicator* c, float* stats);

}  // namespace mt::tp
