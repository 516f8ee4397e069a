// Naive token permutation: the dispatch plan by one pass per expert, the row copies and
// sums one element at a time (sums in double).
#include <cstddef>
#include <vector>

#include "kernels/reference/reference.h"

namespace mt::ref {

int plan_dispatch(int32_t* counts, int32_t* row_of, int32_t* row_token, const int32_t* experts,
                  int N, int E, int k, int capacity, const HeldChoices& held) {
  const size_t A = size_t(N) * k;
  std::vector<bool> kept(A);
  std::vector<int64_t> mine(E, 0);
  for (size_t a = 0; a < A; ++a) {
    // Choices of the group's earlier tokens routed elsewhere count against the capacity:
    // those before this token's segment.
    int64_t elsewhere = 0;
    if (held.counts) {
      int s = 0;
      while (s + 1 < held.segments && int64_t(a / k) >= held.segment_end[s]) ++s;
      elsewhere = held.counts[size_t(s) * E + size_t(experts[a])];
    }
    kept[a] = capacity <= 0 || elsewhere + mine[experts[a]] < capacity;
    mine[experts[a]] += kept[a];
  }
  int32_t row = 0;
  for (int e = 0; e < E; ++e) {
    counts[e] = 0;
    for (size_t a = 0; a < A; ++a) {
      if (experts[a] != e) continue;
      if (!kept[a]) {
        row_of[a] = -1;
        continue;
      }
      row_of[a] = row;
      row_token[row] = int32_t(a / k);
      ++row, ++counts[e];
    }
  }
  return row;
}

void gather_rows(float* dst, const float* src, const int32_t* index, int M, int C) {
  for (int p = 0; p < M; ++p)
    for (int c = 0; c < C; ++c) dst[size_t(p) * C + c] = src[size_t(index[p]) * C + c];
}

void gather_rows_scaled(float* dst, const float* src, const int32_t* row_of, const float* gates,
                        int N, int k, int C) {
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < k; ++j) {
      const int32_t p = row_of[size_t(n) * k + j];
      if (p < 0) continue;
      for (int c = 0; c < C; ++c)
        dst[size_t(p) * C + c] = gates[size_t(n) * k + j] * src[size_t(n) * C + c];
    }
}

void combine_rows(float* y, const float* rows, const int32_t* row_of, const float* gates, int N,
                  int k, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t p = row_of[size_t(n) * k + j];
        if (p >= 0) acc += double(gates[size_t(n) * k + j]) * rows[size_t(p) * C + c];
      }
      y[size_t(n) * C + c] = float(acc);
    }
}

void combine_rows_backward_gates(float* dgates, const float* dy, const float* rows,
                                 const int32_t* row_of, int N, int k, int C) {
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < k; ++j) {
      const int32_t p = row_of[size_t(n) * k + j];
      double acc = 0;
      for (int c = 0; p >= 0 && c < C; ++c)
        acc += double(dy[size_t(n) * C + c]) * rows[size_t(p) * C + c];
      dgates[size_t(n) * k + j] = float(acc);
    }
}

void scatter_add_rows(float* dh, const float* rows, const int32_t* row_of, int N, int k, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t p = row_of[size_t(n) * k + j];
        if (p >= 0) acc += rows[size_t(p) * C + c];
      }
      dh[size_t(n) * C + c] = float(acc);
    }
}

void regroup_blocks(float* dst, const float* src, const int32_t* counts, int S, int B, int C,
                    bool to_expert_major) {
  // Start row of every block (s, b) in both orders, then one copy per row.
  std::vector<size_t> source_major(size_t(S) * B), expert_major(size_t(S) * B);
  size_t row = 0;
  for (int s = 0; s < S; ++s)
    for (int b = 0; b < B; ++b) source_major[size_t(s) * B + b] = row, row += counts[s * B + b];
  row = 0;
  for (int b = 0; b < B; ++b)
    for (int s = 0; s < S; ++s) expert_major[size_t(s) * B + b] = row, row += counts[s * B + b];
  for (size_t i = 0; i < size_t(S) * B; ++i)
    for (int r = 0; r < counts[i]; ++r) {
      const size_t from = (to_expert_major ? source_major[i] : expert_major[i]) + r;
      const size_t to = (to_expert_major ? expert_major[i] : source_major[i]) + r;
      for (int c = 0; c < C; ++c) dst[to * C + c] = src[from * C + c];
    }
}

}  // namespace mt::ref
