// The weight gradient over rows that lie in several expert-major segments (grouped_gemm.h,
// grouped_matmul_backward_weight_segments): the parts of an overlapped exchange
// (model/moe_parts.h) each hold every expert's rows of their own tokens. A call per segment
// would read and write every group's fp32 dweight once per segment (P parts: P times the
// gradient traffic, the largest of the layer's: 64 experts of 512 x 768 are 100 MB of fp32
// to read and write). Instead the rows of a run of groups are gathered, segment after
// segment, into one expert-major block of a bounded per-thread buffer, and the path of the
// precision runs once over that block: each dweight is read and written once.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/grouped_gemm.h"
#include "kernels/phase_profile.h"

namespace mt {

namespace {

// Bytes of gathered rows per run of groups: a run holds at least one group whatever its
// size; beyond that, groups join while they fit (a few MB: the block is read right after
// it is written, mostly from cache).
constexpr size_t kGatherBudget = size_t(8) << 20;

template <typename T>
using Call = void (*)(float* const*, const T*, const T*, const int32_t*, int, int, int);

int64_t group_rows(const int32_t* const* offsets, int segments, int g) {
  int64_t rows = 0;
  for (int s = 0; s < segments; ++s) rows += offsets[s][g + 1] - offsets[s][g];
  return rows;
}

// The end of the run of groups from g0 whose rows fit the budget (at least g0 + 1).
int run_end(const int32_t* const* offsets, int segments, int groups, int g0, size_t row_bytes) {
  size_t bytes = 0;
  int g1 = g0;
  while (g1 < groups) {
    const size_t more = size_t(group_rows(offsets, segments, g1)) * row_bytes;
    if (g1 > g0 && bytes + more > kGatherBudget) break;
    bytes += more, ++g1;
  }
  return g1;
}

// Groups [g0, g1)'s rows of every segment into d (OC wide) and x (C wide), group-major and
// segment after segment within a group; offset (g1 - g0 + 1) the block's groups.
template <typename T>
void gather_run(T* d, T* x, int32_t* offset, const T* dout, const T* inp,
                const int32_t* const* offsets, int segments, int g0, int g1, int C, int OC) {
  offset[0] = 0;
  for (int g = g0; g < g1; ++g)
    offset[g - g0 + 1] = offset[g - g0] + int32_t(group_rows(offsets, segments, g));
#pragma omp parallel for schedule(dynamic)
  for (int g = g0; g < g1; ++g) {
    size_t at = size_t(offset[g - g0]);
    for (int s = 0; s < segments; ++s) {
      const size_t r0 = size_t(offsets[s][g]), rows = size_t(offsets[s][g + 1]) - r0;
      std::memcpy(d + at * OC, dout + r0 * OC, rows * OC * sizeof(T));
      std::memcpy(x + at * C, inp + r0 * C, rows * C * sizeof(T));
      at += rows;
    }
  }
}

template <typename T>
void backward_weight_segments(float* const* dweight, const T* dout, const T* inp,
                              const int32_t* const* offsets, int segments, int groups, int C,
                              int OC, Call<T> call) {
  MT_CHECK(segments >= 1 && groups >= 0, "grouped GEMM over ", segments, " segments");
  if (segments == 1) return call(dweight, dout, inp, offsets[0], groups, C, OC);
  // One phase call, as one segment's: the runs' own calls nest inside it.
  double rows = 0;
  for (int g = 0; g < groups; ++g) rows += double(group_rows(offsets, segments, g));
  PhaseScope phase(Phase::gemm, 2.0 * rows * C * OC,
                   rows * (C + OC) * sizeof(T) + double(groups) * C * OC * (sizeof(T) + 4.0));
  thread_local std::vector<T> buffer;
  thread_local std::vector<int32_t> offset;
  const size_t row_elems = size_t(C) + size_t(OC);
  for (int g0 = 0; g0 < groups;) {
    const int g1 = run_end(offsets, segments, groups, g0, row_elems * sizeof(T));
    offset.resize(size_t(g1 - g0) + 1);
    int64_t run_rows = 0;
    for (int g = g0; g < g1; ++g) run_rows += group_rows(offsets, segments, g);
    buffer.resize(size_t(run_rows) * row_elems);
    T* d = buffer.data();
    T* x = d + size_t(run_rows) * OC;
    gather_run(d, x, offset.data(), dout, inp, offsets, segments, g0, g1, C, OC);
    call(dweight + g0, d, x, offset.data(), g1 - g0, C, OC);
    g0 = g1;
  }
}

}  // namespace

size_t grouped_backward_weight_segments_scratch_bytes(int segments, int64_t rows, int C, int OC,
                                                      size_t element_bytes) {
  // A run is one group whatever its size, or groups within kGatherBudget: never more rows
  // than all the groups', which is the bound when nothing is known of how they are spread.
  if (segments <= 1 || rows <= 0) return 0;
  return size_t(rows) * (size_t(C) + size_t(OC)) * element_bytes;
}

void grouped_matmul_backward_weight_segments(float* const* dweight, const float* dout,
                                             const float* inp, const int32_t* const* offsets,
                                             int segments, int groups, int C, int OC) {
  backward_weight_segments<float>(dweight, dout, inp, offsets, segments, groups, C, OC,
                                  &grouped_matmul_backward_weight);
}

void grouped_matmul_bf16_backward_weight_segments(float* const* dweight, const bf16* dout,
                                                  const bf16* inp, const int32_t* const* offsets,
                                                  int segments, int groups, int C, int OC) {
  backward_weight_segments<bf16>(dweight, dout, inp, offsets, segments, groups, C, OC,
                                 &grouped_matmul_bf16_backward_weight);
}

}  // namespace mt
