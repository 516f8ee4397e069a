#include "kernels/token_permutation.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/phase_profile.h"

namespace mt {

namespace {

// The bytes one permutation kernel moves over M rows of C: each row read once in fp32 and
// written once in the destination's width.
double row_bytes(int M, int C, size_t out_width) {
  return double(M) * C * (sizeof(float) + out_width);
}

// Assignment (n, j)'s gate gradient, dy[n] . rows[p]: every caller sums in this order.
inline float gate_gradient(const float* d, const float* r, int C) {
  float acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int c = 0; c < C; ++c) acc += d[c] * r[c];
  return acc;
}

inline void scaled_row(float* dst, const float* src, float g, int C) {
#pragma omp simd
  for (int c = 0; c < C; ++c) dst[c] = g * src[c];
}

// One row rounded to bf16 on the calling thread (the same bits as to_bf16). The row loops
// below run inside their own OpenMP team; to_bf16 per row would open a (1-thread) team and
// a conversion phase scope for each of the k N rows, which cost the bf16 layer more than
// the rounding itself.
inline void row_to_bf16(bf16* dst, const float* src, int C) {
#pragma omp simd
  for (int c = 0; c < C; ++c) dst[c] = float_to_bf16_select(src[c]);
}

}  // namespace

int expert_capacity(int N, int E, int k, float capacity_factor) {
  if (capacity_factor <= 0) return 0;
  return int(std::ceil(double(N) * k * double(capacity_factor) / E));
}

int plan_dispatch(int32_t* counts, int32_t* row_of, int32_t* row_token, const int32_t* experts,
                  int N, int E, int k, int capacity, const HeldChoices& held) {
  const size_t A = size_t(N) * k;
  for (int e = 0; e < E; ++e) counts[e] = 0;
  // Pass 1, token-major: decide drops. row_of temporarily holds the kept expert or -1.
  // Kept counts only grow, and so does held from segment to segment: once an expert is
  // full for this rank it stays full, as it does for the group walked in token order.
  int segment = 0;
  const int64_t* before = held.counts;  // this segment's row of held.counts
  for (size_t a = 0; a < A; ++a) {
    if (before)
      while (segment + 1 < held.segments && int64_t(a / k) >= held.segment_end[segment])
        before = held.counts + size_t(++segment) * E;
    const int32_t e = experts[a];
    const bool keep = capacity <= 0 || (before ? before[e] : 0) + counts[e] < capacity;
    row_of[a] = keep ? e : -1;
    counts[e] += keep;
  }
  // Pass 2: a counting sort by expert; walking token-major again keeps token order stable.
  // counts[e] serves as the cursor (the start of e's rows) and is restored after.
  int32_t M = 0;
  for (int e = 0; e < E; ++e) {
    const int32_t c = counts[e];
    counts[e] = M;
    M += c;
  }
  for (size_t a = 0; a < A; ++a) {
    if (row_of[a] < 0) continue;
    const int32_t p = counts[row_of[a]]++;
    row_of[a] = p;
    row_token[p] = int32_t(a / k);
  }
  for (int e = E - 1; e > 0; --e) counts[e] -= counts[e - 1];
  return M;
}

void gather_rows(float* dst, const float* src, const int32_t* index, int M, int C) {
  PhaseScope phase(Phase::permutation, 0, row_bytes(M, C, sizeof(float)));
#pragma omp parallel for schedule(static)
  for (int p = 0; p < M; ++p)
    std::memcpy(dst + size_t(p) * C, src + size_t(index[p]) * C, size_t(C) * sizeof(float));
}

void gather_rows(bf16* dst, const float* src, const int32_t* index, int M, int C) {
  PhaseScope phase(Phase::permutation, 0, row_bytes(M, C, sizeof(bf16)));
#pragma omp parallel for schedule(static)
  for (int p = 0; p < M; ++p) row_to_bf16(dst + size_t(p) * C, src + size_t(index[p]) * C, C);
}

void gather_rows_scaled(float* dst, const float* src, const int32_t* row_of, const float* gates,
                        int N, int k, int C) {
  PhaseScope phase(Phase::permutation, 0, row_bytes(N * k, C, sizeof(float)));
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* s = src + size_t(n) * C;
    for (int j = 0; j < k; ++j) {
      const int32_t p = row_of[size_t(n) * k + j];
      if (p < 0) continue;
      scaled_row(dst + size_t(p) * C, s, gates[size_t(n) * k + j], C);
    }
  }
}

void combine_rows(float* y, const float* rows, const int32_t* row_of, const float* gates, int N,
                  int k, int C) {
  PhaseScope phase(Phase::permutation, 0, row_bytes(N * k, C, 0) + double(N) * C * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* out = y + size_t(n) * C;
    std::memset(out, 0, size_t(C) * sizeof(float));
    for (int j = 0; j < k; ++j) {
      const int32_t p = row_of[size_t(n) * k + j];
      if (p < 0) continue;
      const float g = gates[size_t(n) * k + j];
      const float* r = rows + size_t(p) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) out[c] += g * r[c];
    }
  }
}

void combine_rows_backward_gates(float* dgates, const float* dy, const float* rows,
                                 const int32_t* row_of, int N, int k, int C) {
  PhaseScope phase(Phase::permutation, 2.0 * N * k * C, row_bytes(N * k, C, 0));
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* d = dy + size_t(n) * C;
    for (int j = 0; j < k; ++j) {
      const int32_t p = row_of[size_t(n) * k + j];
      dgates[size_t(n) * k + j] = p >= 0 ? gate_gradient(d, rows + size_t(p) * C, C) : 0.0f;
    }
  }
}

// One pass over dy for both precisions of d_rows: each kept assignment's gate gradient, and
// its gate-scaled row stored as Out (bf16 rows are scaled in fp32, then rounded as stored).
template <typename Out>
void combine_rows_backward_into(float* dgates, Out* d_rows, const float* dy, const float* rows,
                                const int32_t* row_of, const float* gates, int N, int k, int C) {
  PhaseScope phase(Phase::permutation, 3.0 * N * k * C, row_bytes(N * k, C, sizeof(Out)));
#pragma omp parallel
  {
    std::vector<float> scaled(std::is_same_v<Out, bf16> ? size_t(C) : 0);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      const float* d = dy + size_t(n) * C;
      for (int j = 0; j < k; ++j) {
        const size_t a = size_t(n) * k + j;
        const int32_t p = row_of[a];
        dgates[a] = p >= 0 ? gate_gradient(d, rows + size_t(p) * C, C) : 0.0f;
        if (p < 0) continue;
        if constexpr (std::is_same_v<Out, bf16>) {
          scaled_row(scaled.data(), d, gates[a], C);
          row_to_bf16(d_rows + size_t(p) * C, scaled.data(), C);
        } else {
          scaled_row(d_rows + size_t(p) * C, d, gates[a], C);
        }
      }
    }
  }
}

void combine_rows_backward(float* dgates, float* d_rows, const float* dy, const float* rows,
                           const int32_t* row_of, const float* gates, int N, int k, int C) {
  combine_rows_backward_into(dgates, d_rows, dy, rows, row_of, gates, N, k, C);
}

void combine_rows_backward(float* dgates, bf16* d_rows, const float* dy, const float* rows,
                           const int32_t* row_of, const float* gates, int N, int k, int C) {
  combine_rows_backward_into(dgates, d_rows, dy, rows, row_of, gates, N, k, C);
}

void scatter_add_rows(float* dh, const float* rows, const int32_t* row_of, int N, int k, int C) {
  PhaseScope phase(Phase::permutation, double(N) * k * C,
                   row_bytes(N * k, C, 0) + double(N) * C * sizeof(float));
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* out = dh + size_t(n) * C;
    std::memset(out, 0, size_t(C) * sizeof(float));
    for (int j = 0; j < k; ++j) {
      const int32_t p = row_of[size_t(n) * k + j];
      if (p < 0) continue;
      const float* r = rows + size_t(p) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) out[c] += r[c];
    }
  }
}

namespace {

// Token n's kept rows in row order, with their assignments: at most k, sorted in place.
int kept_rows_in_order(int32_t* rows, int32_t* assignment, const int32_t* row_of, int n, int k) {
  int kept = 0;
  for (int j = 0; j < k; ++j) {
    const int32_t a = n * k + j, p = row_of[a];
    if (p < 0) continue;
    int at = kept++;
    for (; at > 0 && rows[at - 1] > p; --at)
      rows[at] = rows[at - 1], assignment[at] = assignment[at - 1];
    rows[at] = p, assignment[at] = a;
  }
  return kept;
}

// y (N, C) = per token, 0 plus its kept rows in row order (times their gates when gates is
// non-null), through the row steps the GEMMs' stores use.
void sum_rows_in_row_order(float* y, const float* rows, const int32_t* row_of, const float* gates,
                           int N, int k, int C) {
#pragma omp parallel
  {
    std::vector<int32_t> order(size_t(2) * k);
#pragma omp for schedule(static)
    for (int n = 0; n < N; ++n) {
      float* out = y + size_t(n) * C;
      std::memset(out, 0, size_t(C) * sizeof(float));
      const int kept = kept_rows_in_order(order.data(), order.data() + k, row_of, n, k);
      for (int i = 0; i < kept; ++i) {
        const float* r = rows + size_t(order[size_t(i)]) * C;
        if (gates)
          add_scaled_row(out, r, gates[order[size_t(k + i)]], C);
        else
          add_row(out, r, C);
      }
    }
  }
}

}  // namespace

void combine_rows_in_row_order(float* y, const float* rows, const int32_t* row_of,
                               const float* gates, int N, int k, int C) {
  PhaseScope phase(Phase::permutation, 0, row_bytes(N * k, C, 0) + double(N) * C * sizeof(float));
  sum_rows_in_row_order(y, rows, row_of, gates, N, k, C);
}

void scatter_add_rows_in_row_order(float* dh, const float* rows, const int32_t* row_of, int N,
                                   int k, int C) {
  PhaseScope phase(Phase::permutation, double(N) * k * C,
                   row_bytes(N * k, C, 0) + double(N) * C * sizeof(float));
  sum_rows_in_row_order(dh, rows, row_of, nullptr, N, k, C);
}

void regroup_blocks(float* dst, const float* src, const int32_t* counts, int S, int B, int C,
                    bool to_expert_major) {
  int64_t total = 0;
  for (int i = 0; i < S * B; ++i) total += counts[i];
  PhaseScope phase(Phase::permutation, 0, row_bytes(int(total), C, sizeof(float)));
  // Walk blocks in expert-major order, tracking the block's offset in that order; its
  // source-major offset is the start of source s plus the blocks of s before b. S*B is the
  // number of experts, so the quadratic offset search is negligible next to the copies.
  size_t em = 0;
  for (int b = 0; b < B; ++b) {
    for (int s = 0; s < S; ++s) {
      size_t sm = 0;
      for (int i = 0; i < s * B + b; ++i) sm += size_t(counts[i]);
      const size_t rows = size_t(counts[s * B + b]);
      const size_t from = to_expert_major ? sm : em, to = to_expert_major ? em : sm;
      if (rows) std::memcpy(dst + to * C, src + from * C, rows * C * sizeof(float));
      em += rows;
    }
  }
}

}  // namespace mt
