// Tensor-parallel communication regions, each declared next to its adjoint (the idea of
// Megatron's mappings.py). A layer calls a region's forward on the way in and the same
// region's backward on the way back, so the two directions can never disagree:
//
//   region                     forward                 backward (the adjoint)
//   CopyToTensorParallel       identity                all-reduce (sum)
//   ReduceFromTensorParallel   all-reduce (sum)        identity
//   GatherFromSequenceParallel all-gather of rows      reduce-scatter of rows (sum)
//   ScatterToSequenceParallel  reduce-scatter of rows  all-gather of rows
//
// The first two surround a column-parallel -> row-parallel pair when every rank holds
// the whole sequence; the last two replace them under sequence parallelism, where rank r
// holds rows [r*N/t, (r+1)*N/t) of the N = b*T token rows of a (N, C) activation (the
// microbatch's tokens in (b, T) order, so the gathered buffer is the ordinary (b, T, C)).
//
// The layers of this folder (column_parallel_linear.h, row_parallel_linear.h,
// vocab_parallel_embedding.h, vocab_parallel_cross_entropy.h) are built from these regions;
// model/ uses the layers. A null communicator, or a group of one, makes every region the
// identity (copies where input and output differ).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "comm/communicator.h"

namespace mt::tp {

inline bool active(const Communicator* c) {
  return c != nullptr && c->size() > 1;
}

// x (n) = sum over the group of x, in place.
inline void all_reduce_sum(Communicator* c, float* x, size_t n) {
  if (!active(c)) return;
  WaitedAtOnce at_once;
  c->all_reduce(x, x, n, DType::f32, ReduceOp::sum).wait();
}

// full (t * n) = concatenation in rank order of every rank's local (n).
inline void all_gather_rows(Communicator* c, const float* local, float* full, size_t n) {
  if (active(c)) {
    WaitedAtOnce at_once;
    c->all_gather(local, full, n, DType::f32).wait();
  } else if (full != local)
    std::memcpy(full, local, n * sizeof(float));
}

// The same for bf16 rows (--precision bf16 gathers the GEMM inputs in bf16, half the
// bytes): moved as bytes, nothing is summed.
inline void all_gather_rows(Communicator* c, const uint16_t* local, uint16_t* full, size_t n) {
  if (active(c)) {
    WaitedAtOnce at_once;
    c->all_gather(local, full, n * sizeof(uint16_t), DType::u8).wait();
  } else if (full != local)
    std::memcpy(full, local, n * sizeof(uint16_t));
}

// local (n) = chunk `rank` of the group sum of full (t * n).
inline void reduce_scatter_rows(Communicator* c, const float* full, float* local, size_t n) {
  if (active(c)) {
    WaitedAtOnce at_once;
    c->reduce_scatter(full, local, n, DType::f32, ReduceOp::sum).wait();
  } else if (full != local)
    std::memcpy(local, full, n * sizeof(float));
}

// Entry of a column-parallel layer: every rank already holds the whole input; its
// gradient is a partial sum per rank (each saw only its columns) and must be summed.
struct CopyToTensorParallel {
  static void forward() {}
  // dx (n): partial on entry, the full gradient on exit.
  static void backward(Communicator* c, float* dx, size_t n) { all_reduce_sum(c, dx, n); }
};

// Exit of a row-parallel layer: each rank's output is a partial sum over its input rows.
struct ReduceFromTensorParallel {
  // y (n): partial on entry, the full output on exit.
  static void forward(Communicator* c, float* y, size_t n) { all_reduce_sum(c, y, n); }
  static void backward() {}
};

// Entry of a column-parallel layer under sequence parallelism.
struct GatherFromSequenceParallel {
  // full (t * n) <- local (n) of every rank.
  static void forward(Communicator* c, const float* local, float* full, size_t n) {
    all_gather_rows(c, local, full, n);
  }
  // dlocal (n) <- this rank's rows of the sum of every rank's partial dfull (t * n).
  static void backward(Communicator* c, const float* dfull, float* dlocal, size_t n) {
    reduce_scatter_rows(c, dfull, dlocal, n);
  }
};

// Exit of a row-parallel layer under sequence parallelism.
struct ScatterToSequenceParallel {
  // local (n) <- this rank's rows of the sum of every rank's partial full (t * n).
  static void forward(Communicator* c, const float* full, float* local, size_t n) {
    reduce_scatter_rows(c, full, local, n);
  }
  // dfull (t * n) <- dlocal (n) of every rank.
  static void backward(Communicator* c, const float* dlocal, float* dfull, size_t n) {
    all_gather_rows(c, dlocal, dfull, n);
  }
};

}  // namespace mt::tp
