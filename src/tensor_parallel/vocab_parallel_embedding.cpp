#include "tensor_parallel/vocab_parallel_embedding.h"

#include <cstddef>

#include "kernels/embedding.h"
#include "tensor_parallel/mappings.h"

namespace mt::tp {

VocabParallelEmbedding::VocabParallelEmbedding(const TensorParallelShard& tp, int vocab, int dim,
                                               const int* positions)
    : tp_(tp),
      V_(vocab),
      C_(dim),
      shard_(vocab_shard(vocab, tp.size, tp.rank)),
      positions_(positions) {}

void VocabParallelEmbedding::bind(const float* wte, const float* wpe, float* dwte, float* dwpe) {
  wte_ = wte, wpe_ = wpe, dwte_ = dwte, dwpe_ = dwpe;
}

void VocabParallelEmbedding::forward(float* x_out, const int* tokens, int b, int T,
                                     float* scratch) const {
  if (tp_.size == 1) {
    embedding_forward(x_out, tokens, wte_, wpe_, b, T, C_, 0, V_, positions_);
    return;
  }
  // Each id lives on one rank and wpe is added on rank 0 only: the sum adds exact zeros,
  // so the result is bitwise the one-worker wte[id] + wpe[t].
  const size_t N = size_t(b) * T;
  float* partial = tp_.sequence_parallel ? scratch : x_out;
  embedding_forward(partial, tokens, wte_, tp_.rank == 0 ? wpe_ : nullptr, b, T, C_, shard_.start,
                    shard_.rows, positions_);
  if (tp_.sequence_parallel)
    ScatterToSequenceParallel::forward(tp_.comm, partial, x_out, N * C_ / tp_.size);
  else
    ReduceFromTensorParallel::forward(tp_.comm, x_out, N * C_);
}

void VocabParallelEmbedding::backward_weight(const float* dx_out, const int* tokens, int b, int T,
                                             float* scratch) const {
  const float* d = dx_out;
  if (tp_.splits_sequence()) {
    const size_t N = size_t(b) * T;
    ScatterToSequenceParallel::backward(tp_.comm, dx_out, scratch, N * C_ / tp_.size);
    d = scratch;
  }
  // The gradient is the whole (b, T, C) on every rank: dwpe comes out identical everywhere.
  embedding_backward(dwte_, dwpe_, d, tokens, b, T, C_, shard_.start,
                     tp_.size == 1 ? V_ : shard_.rows, positions_);
}

}  // namespace mt::tp
