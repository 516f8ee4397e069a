// The grouped GEMMs of grouped_gemm.h as their micro-kernel drivers see them (internal): each
// of the three products is, per group g, one GEMM
//   C_g (M, N) [+]= A_g (M, K) @ B_g (K, N)
// with transposes read through strides, and the work is split into items (group, block of
// N columns) handed to the OpenMP team.
//
//   product          M        K        N   A_g            B_g                  C_g
//   forward          rows_g   C        OC  inp_g          weight[g]^T          out_g
//   backward_input   rows_g   OC       C   dout_g         weight[g]            dinp_g
//   backward_weight  OC       rows_g   C   dout_g^T       inp_g                dweight[g]
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/bf16.h"

namespace mt::grouped {

enum class Product { forward, backward_input, backward_weight };

template <typename T>
struct Problem {
  Product product;
  float* out;              // forward, backward_input: (total, N) rows
  float* const* dweight;   // backward_weight: per group (OC, C)
  const T* rows;           // inp (forward), dout (backward_input, backward_weight)
  const T* inp;            // backward_weight's B
  const T* const* weight;  // forward, backward_input: per group (OC, C)
  const int32_t* offset;
  int groups, C, OC;
  bool accumulate;
  // (out may be null where the rows go to `tokens` only, below.)
  // forward, backward_input on the AMX path: weight[g] packed whole (GroupedPack), or null.
  const uint32_t* const* packed = nullptr;
  // SwiGLU on the AMX path's stored blocks (grouped_gemm.h's *_swiglu), swiglu = H (0: none):
  // forward (OC = 2H) also writes act (total, H); backward_input (C = H) writes dgu (total,
  // 2H) from gu (total, 2H) and never stores its own result.
  int swiglu = 0;
  bf16* act = nullptr;
  bf16* dgu = nullptr;
  const float* gu = nullptr;
  // Rows summed into token rows as they leave the tiles, on the AMX path (grouped_gemm.h's
  // *_into_tokens): row r's result (times scale[r] when scale is non-null) is added to
  // tokens (., N) row token[r]; `out` also gets the rows where it is non-null.
  float* tokens = nullptr;
  const int32_t* token = nullptr;
  const float* scale = nullptr;
  int N() const { return product == Product::forward ? OC : C; }
};

// A forward or backward_input Problem (the rows times each group's weight): the one spelling
// of its fields for every entry point (grouped_gemm.cpp, *_swiglu, *_into_tokens), which then
// set the optional fields they use.
template <typename T>
Problem<T> rows_problem(Product product, float* out, const T* rows, const T* const* weight,
                        const int32_t* offset, int groups, int C, int OC, bool accumulate,
                        const uint32_t* const* packed = nullptr) {
  Problem<T> p{product, out, nullptr, rows, nullptr, weight, offset, groups, C, OC, accumulate};
  p.packed = packed;
  return p;
}

// One group's GEMM. A (i, k) is a[i * lda + k], or a[k * lda + i] when a_trans; B (k, n) is
// b[k * ldb + n], or b[n * ldb + k] when b_trans; C (i, n) is c[i * ldc + n].
template <typename T>
struct Operands {
  int M, K;
  const T* a;
  size_t lda;
  bool a_trans;
  const T* b;
  size_t ldb;
  bool b_trans;
  float* c;
  size_t ldc;
  bool accumulate;
};

template <typename T>
Operands<T> operands(const Problem<T>& p, int g) {
  const size_t r0 = size_t(p.offset[g]);
  const int rows = p.offset[g + 1] - p.offset[g];
  const size_t C = size_t(p.C), OC = size_t(p.OC);
  switch (p.product) {
    case Product::forward:  // accumulate: onto a bias put there first (dense_gemm_bf16)
      return {rows, p.C,         p.rows + r0 * C,
              C,    false,       p.weight[g],
              C,    true,        p.out ? p.out + r0 * OC : nullptr,
              OC,   p.accumulate};
    case Product::backward_input:
      return {rows, p.OC,        p.rows + r0 * OC,
              OC,   false,       p.weight[g],
              C,    false,       p.out ? p.out + r0 * C : nullptr,
              C,    p.accumulate};
    case Product::backward_weight:
      break;
  }
  return {p.OC, rows, p.rows + r0 * OC, OC, true, p.inp + r0 * C, C, false, p.dweight[g], C, true};
}

inline int max_rows(const int32_t* offset, int groups) {
  int largest = 0;
  for (int g = 0; g < groups; ++g) largest = std::max(largest, offset[g + 1] - offset[g]);
  return largest;
}

// The K of the problem's largest GEMM (backward_weight's is a group's rows).
template <typename T>
int largest_k(const Problem<T>& p) {
  switch (p.product) {
    case Product::forward:
      return p.C;
    case Product::backward_input:
      return p.OC;
    case Product::backward_weight:
      break;
  }
  return max_rows(p.offset, p.groups);
}

// Items: every group's N columns in `blocks` blocks of `cols` (a multiple of `panel`; the
// last block may be shorter). One thread takes whole groups; a team splits the columns so
// that the largest group's item is at most a quarter of a thread's share of the rows, and
// so that the packed block (K x cols elements of `elem_bytes`) stays within `pack_budget`.
struct Item {
  int g = -1, n0 = 0, n1 = 0;  // g < 0: no item
};

struct Work {
  int groups, blocks, cols, N;
  int64_t items() const { return int64_t(groups) * blocks; }
  Item item(int64_t i) const {
    if (i < 0 || i >= items()) return {};
    const int n0 = int(i % blocks) * cols;
    return {int(i / blocks), n0, std::min(N, n0 + cols)};
  }
};

inline Work split_work(const int32_t* offset, int groups, int N, int K, int panel,
                       size_t elem_bytes, size_t pack_budget, int threads) {
  const int panels = std::max(1, (N + panel - 1) / panel);
  int blocks = 1;
  if (threads > 1) {
    int64_t total = 0, largest = 0;
    for (int g = 0; g < groups; ++g) {
      const int64_t rows = offset[g + 1] - offset[g];
      total += rows, largest = std::max(largest, rows);
    }
    if (total > 0) blocks = int((4 * threads * largest + total - 1) / total);
  }
  const size_t panel_bytes = size_t(std::max(K, 1)) * panel * elem_bytes;
  blocks = std::max<int64_t>(blocks, (panels * panel_bytes + pack_budget - 1) / pack_budget);
  blocks = std::clamp(blocks, 1, panels);
  const int cols = (panels + blocks - 1) / blocks * panel;
  return {groups, (N + cols - 1) / cols, cols, N};
}

// Runs setup() once per thread of the team, then item(this, next) for every item, where
// next is the item the thread will likely take after this one (items are handed out
// dynamically, group sizes being uneven: the one a team's size further on), then
// teardown() per thread.
template <typename Setup, typename Run, typename Teardown>
void for_each_item(const Work& w, Setup&& setup, Run&& run, Teardown&& teardown) {
  const int64_t items = w.items();
  if (items == 0) return;
  const int threads = int(std::min<int64_t>(omp_get_max_threads(), items));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    setup();
    const int team = omp_get_num_threads();
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < items; ++i) run(w.item(i), w.item(i + team));
    teardown();
  }
}

}  // namespace mt::grouped
