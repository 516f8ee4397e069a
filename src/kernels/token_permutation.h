// Local token permutation of a mixture-of-experts layer (permute to expert-sorted rows,
// unpermute with the gates, scatter-add back), kept apart from the communication
// (model/token_exchange.h) so the two can be scheduled independently. Naive twins:
// kernels/reference/.
//
// Assignments are the (token, choice) pairs of the router, choice 0 being the highest
// score. Capacity drops walk them token-major — (0,0), (0,1), .., (0,k-1), (1,0), .. — and
// drop an assignment when its expert already holds `capacity` earlier ones. The kept ones
// are then laid out sorted by expert, stably (token order inside an expert), so each
// expert's rows are contiguous and one GEMM per expert covers them. Because the experts
// owned by ep rank d are the consecutive range d*E/ep.., the same order is also grouped by
// destination rank, ready for the all-to-all.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/bf16.h"

namespace mt {

// Choices of a group's tokens that other ranks route (tensor parallelism's token split,
// context parallelism's zigzag rows: model/route_group.h), for the capacity drops. This rank's
// N tokens are `segments` runs of consecutive group tokens, segment s ending before token
// segment_end[s] (the last at N); counts (segments, E) holds, per segment, the choices of each
// expert by the other ranks' tokens that come before it in the group's token order.
struct HeldChoices {
  const int64_t* counts = nullptr;  // null: the group is this rank's alone
  const int32_t* segment_end = nullptr;
  int segments = 0;
};

// From experts (N, k): counts (E) kept rows per expert, row_of (N, k) the row of each
// assignment in the expert-sorted order (-1 when dropped), row_token (M) the token of each
// row. capacity <= 0 means dropless. Returns M, the number of kept assignments.
// held: an expert keeps an assignment only while the group's earlier choices of it held
// elsewhere (held.counts of the token's segment) plus its kept ones here stay below the
// capacity, so the drops are those of the whole group.
int plan_dispatch(int32_t* counts, int32_t* row_of, int32_t* row_token, const int32_t* experts,
                  int N, int E, int k, int capacity, const HeldChoices& held = {});

// Capacity of one expert for one group of N tokens (docs/contracts.md §1): ceil(N * k * F / E),
// F taken at its float value; 0 (dropless) when F is 0.
int expert_capacity(int N, int E, int k, float capacity_factor);

// dst (M, C): row p = src[index[p]]. The bf16 form rounds each row as to_bf16 does (the
// same bits as gathering in fp32 and rounding the block), packing a GEMM's bf16 input rows
// straight from the tokens: no fp32 copy of the M rows in between.
void gather_rows(float* dst, const float* src, const int32_t* index, int M, int C);
void gather_rows(bf16* dst, const float* src, const int32_t* index, int M, int C);
// dst (M, C): row p = scale[p'] * src[index[p]], where p' is the assignment of row p.
// Used to send gate-weighted output gradients to the experts.
void gather_rows_scaled(float* dst, const float* src, const int32_t* row_of, const float* gates,
                        int N, int k, int C);
// y (N, C) = sum over kept choices of gates[n, j] * rows[row_of[n, j]] (overwrites y; a
// token whose choices were all dropped gets 0).
void combine_rows(float* y, const float* rows, const int32_t* row_of, const float* gates, int N,
                  int k, int C);
// dgates (N, k) = dy[n] . rows[row_of[n, j]] (0 for dropped choices).
void combine_rows_backward_gates(float* dgates, const float* dy, const float* rows,
                                 const int32_t* row_of, int N, int k, int C);
// The adjoint of combine_rows in one pass over the assignments: dgates as
// combine_rows_backward_gates (the same sums, the same bits) and d_rows as
// gather_rows_scaled (bf16: each row rounded as to_bf16 does). d_rows may be rows: a row is
// read for its gate's gradient before it is overwritten.
void combine_rows_backward(float* dgates, float* d_rows, const float* dy, const float* rows,
                           const int32_t* row_of, const float* gates, int N, int k, int C);
void combine_rows_backward(float* dgates, bf16* d_rows, const float* dy, const float* rows,
                           const int32_t* row_of, const float* gates, int N, int k, int C);
// dh (N, C) = sum over kept choices of rows[row_of[n, j]] (overwrites dh).
void scatter_add_rows(float* dh, const float* rows, const int32_t* row_of, int N, int k, int C);

// The bf16 experts' sums (--precision bf16): combine_rows and scatter_add_rows with each
// token's rows summed in row order (the order of their experts) instead of the choices'.
// That is the order in which a grouped GEMM finishes them, so at ep 1 the sums run in the
// GEMMs' stores (grouped_gemm.h, *_into_tokens) with these bits, and every layout (ep, tp's
// token split, the parts of moe_parts.h: a token's rows keep their experts' order in all)
// gets the same bits. fp32 keeps the choices' order (its bits are those of earlier runs).
void combine_rows_in_row_order(float* y, const float* rows, const int32_t* row_of,
                               const float* gates, int N, int k, int C);
void scatter_add_rows_in_row_order(float* dh, const float* rows, const int32_t* row_of, int N,
                                   int k, int C);

// The row steps of those sums, shared with the GEMMs' stores so that both give the same bits:
// out += r, and out += g r as one fused multiply-add per element.
inline void add_row(float* out, const float* r, int C) {
#pragma omp simd
  for (int c = 0; c < C; ++c) out[c] += r[c];
}
inline void add_scaled_row(float* out, const float* r, float g, int C) {
#pragma omp simd
  for (int c = 0; c < C; ++c) out[c] = std::fma(g, r[c], out[c]);
}

// Regroups blocks of rows between source-major and expert-major order on the expert's
// rank. counts[s * B + b] is the row count of block (s, b): source rank s, local expert b.
// to_expert_major: src is ordered (s, b) and dst (b, s); otherwise the reverse.
void regroup_blocks(float* dst, const float* src, const int32_t* counts, int S, int B, int C,
                    bool to_expert_major);

}  // namespace mt
