// Token + position embedding with the token table split by vocabulary rows over tp
// (vocab_parallel.h). Each rank looks up the ids it holds (0 for the others) and the
// partial rows are summed: ReduceFromTensorParallel (all-reduce), or under sequence
// parallelism ScatterToSequenceParallel (reduce-scatter, leaving each rank its rows of the
// sequence). The position table is replicated; rank 0 alone adds it, so the sum holds it
// once. The W pass sees the whole (gathered, under sequence parallelism) output gradient,
// so every rank computes the same position-table gradient. There is no input gradient.
#pragma once

#include "tensor_parallel/tensor_parallel_shard.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt::tp {

class VocabParallelEmbedding {
 public:
  // positions: the true position of each of the T rows (context parallelism's zigzag
  // shard), read by the position table; null means 0..T-1.
  VocabParallelEmbedding(const TensorParallelShard& tp, int vocab, int dim,
                         const int* positions = nullptr);
  // wte (shard.rows, C) this rank's rows of the token table, wpe (T', C) the position
  // table, and their gradients.
  void bind(const float* wte, const float* wpe, float* dwte, float* dwpe);

  // x_out (b, T, C) = wte[tokens] + wpe[positions]; under sequence parallelism x_out holds this
  // rank's b*T/t rows. scratch: (b*T, C) floats (sequence parallelism only).
  void forward(float* x_out, const int* tokens, int b, int T, float* scratch) const;
  // dwte, dwpe += from dx_out (b, T, C) (this rank's rows under sequence parallelism).
  void backward_weight(const float* dx_out, const int* tokens, int b, int T, float* scratch) const;

 private:
  TensorParallelShard tp_;
  int V_, C_;
  VocabShard shard_;
  const int* positions_ = nullptr;
  const float *wte_ = nullptr, *wpe_ = nullptr;
  float *dwte_ = nullptr, *dwpe_ = nullptr;
};

}  // namespace mt::tp
