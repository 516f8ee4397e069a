// Grouped GEMMs: the linear-layer triple (kernels/matmul.h) for many small groups of rows in
// one call, each group with its own weight. The experts of a mixture-of-experts layer are the
// use: rows arrive expert-major (group g owns rows [offset[g], offset[g + 1]) of one block, as
// model/expert_mlp.h's ExpertGroups), expert g's weight is weight[g] (OC, C) row-major:
//   forward          out_g (rows_g, OC)  = inp_g (rows_g, C) @ weight[g]^T
//   backward_input   dinp_g (rows_g, C) (+)= dout_g (rows_g, OC) @ weight[g]
//   backward_weight  dweight[g] (OC, C) += dout_g^T @ inp_g
// Any row counts, zero included (a group of no rows is skipped: its dweight is untouched).
//
// Why not a loop of oneDNN GEMMs: each small call repacks its weight and, in bf16, runs a
// primitive cached per shape (a group's row count is a new shape, split into power-of-two
// pieces, and small pieces take slow kernels). Here one call walks work items (group, block
// of output columns) over the OpenMP team: an item packs its block of the weight once into
// the micro-kernel's layout (a thread-local buffer, K x block), then runs every row of the
// group against it. Micro-kernels: AVX-512 FMA (fp32, 12 x 32 register tiles), AMX tiles
// (bf16, 32 x 32 per step of 32 in K), AVX512-BF16 dot products (bf16, 12 x 32 register
// tiles), picked at run time (GroupedGemmPath below).
//
// Bits: on every path but loop, a row's output depends only on that row and the weight (not
// on the other rows, the group sizes or the thread count): K is always summed in the same
// order. The paths' bits differ from each other (other summation orders). The weight
// gradient sums a group's rows in row order, in any team. fp32 and bf16 both accumulate in
// fp32; bf16 rounds nothing but its inputs (the bounds of tests/kernels/test_bf16.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "kernels/bf16.h"

namespace mt {

// out (total, OC) = per group g: inp_g (rows_g, C) @ weight[g]^T; weight[g] is (OC, C).
void grouped_matmul_forward(float* out, const float* inp, const float* const* weight,
                            const int32_t* offset, int groups, int C, int OC);

// dinp (total, C) += per group: dout_g (rows_g, OC) @ weight[g] (OC, C); with accumulate
// false, dinp = (overwritten, rows of empty groups excepted: they are not rows).
void grouped_matmul_backward_input(float* dinp, const float* dout, const float* const* weight,
                                   const int32_t* offset, int groups, int C, int OC,
                                   bool accumulate = true);

// dweight[g] (OC, C) += dout_g^T (OC, rows_g) @ inp_g (rows_g, C), for groups with rows.
void grouped_matmul_backward_weight(float* const* dweight, const float* dout, const float* inp,
                                    const int32_t* offset, int groups, int C, int OC);

// The same with bf16 operands, fp32 accumulation and fp32 results (--precision bf16).
// packed (optional, per group): weight[g] packed once for the product (grouped_bf16_pack
// below), read instead of packing it again on every call; the same bits either way.
void grouped_matmul_bf16_forward(float* out, const bf16* inp, const bf16* const* weight,
                                 const int32_t* offset, int groups, int C, int OC,
                                 const uint32_t* const* packed = nullptr);
void grouped_matmul_bf16_backward_input(float* dinp, const bf16* dout, const bf16* const* weight,
                                        const int32_t* offset, int groups, int C, int OC,
                                        bool accumulate = true,
                                        const uint32_t* const* packed = nullptr);
void grouped_matmul_bf16_backward_weight(float* const* dweight, const bf16* dout, const bf16* inp,
                                         const int32_t* offset, int groups, int C, int OC);

// The weight gradient over rows in several expert-major segments (the parts of
// model/moe_parts.h): dweight[g] += sum over segments s of dout_{s,g}^T @ inp_{s,g}, where
// segment s's group g owns rows [offsets[s][g], offsets[s][g + 1]) of dout and inp. Each
// dweight is read and written once, not once per segment (grouped_gemm_segments.cpp); a
// group's rows are summed segment after segment, in row order within each. One segment is
// grouped_matmul_backward_weight with offsets[0].
void grouped_matmul_backward_weight_segments(float* const* dweight, const float* dout,
                                             const float* inp, const int32_t* const* offsets,
                                             int segments, int groups, int C, int OC);
void grouped_matmul_bf16_backward_weight_segments(float* const* dweight, const bf16* dout,
                                                  const bf16* inp, const int32_t* const* offsets,
                                                  int segments, int groups, int C, int OC);
// The most the two calls above keep in their thread_local gather buffer (on the calling
// thread, for as long as it lives; it grows to the largest call): with one segment nothing;
// else a run of groups' rows of dout and inp, at most `rows` rows (the groups' total) of
// C + OC elements of `element_bytes`. The memory estimate counts it (model/expert_mlp.h).
size_t grouped_backward_weight_segments_scratch_bytes(int segments, int64_t rows, int C, int OC,
                                                      size_t element_bytes);

// SwiGLU fused into the store of the grouped GEMM beside it (the bf16 SwiGLU experts,
// model/expert_mlp_bf16.h): on the AMX path each block of results goes through SwiGLU while
// it is in L1, so one fp32 operand of the unfused composition never makes a round trip
// through memory; the results are the composition's bit for bit (swiglu.h's row functions
// on the same values). Elsewhere (other paths, H not a multiple of 16) the composition runs.
//   forward         gu (total, 2H) = inp @ weight[g]^T (OC = 2H), and act (total, H) =
//                   swiglu_forward_bf16(gu): gu is still written (the backward reads it)
//   backward_input  d_act_g = dout_g (rows, OC) @ weight[g] (OC, H) and then dgu (total, 2H) =
//                   swiglu_backward_bf16(gu, d_act): on the AMX path d_act is never stored
void grouped_matmul_bf16_forward_swiglu(float* gu, bf16* act, const bf16* inp,
                                        const bf16* const* weight, const int32_t* offset,
                                        int groups, int C, int H,
                                        const uint32_t* const* packed = nullptr);
void grouped_matmul_bf16_backward_input_swiglu(bf16* dgu, const float* gu, const bf16* dout,
                                               const bf16* const* weight, const int32_t* offset,
                                               int groups, int H, int OC,
                                               const uint32_t* const* packed = nullptr);
// Whether the two calls above run fused now (AMX path, H a multiple of 16).
bool grouped_bf16_fuses_swiglu(int H);
// The most each thread running the fused backward_input keeps in its thread_local d_act
// block (32 rows x at most H fp32 units), whether or not this CPU fuses: the memory
// estimate counts it on every CPU, so that an estimate does not depend on the machine.
size_t grouped_bf16_swiglu_scratch_bytes(int H);

// The rows summed into token rows in the GEMM's store (the bf16 experts where nothing
// travels, model/expert_mlp_bf16.h): row r of the product, times scale[r] where scale is
// non-null, is added to tokens (., N) row token[r] as its block leaves the tiles, so the
// rows need not make a round trip through memory before their sum. Each token's rows are
// added in row order, with token_permutation.h's row steps: the bits of the row-order sums
// (combine_rows_in_row_order, scatter_add_rows_in_row_order) over the stored rows. tokens
// holds the sums' start (zeros). `out` (may be null) gets the rows too. Only where
// grouped_bf16_sums_into_tokens() (MT_CHECK).
//   forward         N = OC: tokens[token[r]] += scale[r] * (inp_r @ weight[g]^T)
//   backward_input  N = C:  tokens[token[r]] += dout_r @ weight[g]
void grouped_matmul_bf16_forward_into_tokens(float* tokens, const int32_t* token,
                                             const float* scale, float* out, const bf16* inp,
                                             const bf16* const* weight, const int32_t* offset,
                                             int groups, int C, int OC,
                                             const uint32_t* const* packed = nullptr);
void grouped_matmul_bf16_backward_input_into_tokens(float* tokens, const int32_t* token,
                                                    const bf16* dout, const bf16* const* weight,
                                                    const int32_t* offset, int groups, int C,
                                                    int OC,
                                                    const uint32_t* const* packed = nullptr);
// Whether the two calls above run now: on the AMX path, in a team of one thread (the only
// team whose blocks finish in row order; larger teams sum the stored rows after).
bool grouped_bf16_sums_into_tokens();

// Turns the sums into token rows off (or on) for the whole process while it lives: the tests
// and bench_moe_layer compare them with the sums over the stored rows. Training never sets it.
class ScopedGroupedGemmTokenSums {
 public:
  explicit ScopedGroupedGemmTokenSums(bool on);
  ~ScopedGroupedGemmTokenSums();
  ScopedGroupedGemmTokenSums(const ScopedGroupedGemmTokenSums&) = delete;
  ScopedGroupedGemmTokenSums& operator=(const ScopedGroupedGemmTokenSums&) = delete;

 private:
  bool saved_;
};

// Pre-packed bf16 weights. The AMX and AVX512-BF16 paths multiply by their B operand in
// pair panels (grouped_gemm_pack.h): weight[g]^T for forward, weight[g] for backward_input.
// Packing them per call is a quarter (AMX) to a third (AVX512-BF16) of their time at the
// experts' shapes; a weight packed whole once per change of the weights
// (model/expert_gemm.h's Bf16ExpertWeights) serves every call and every column block of one
// (a block is whole panels of the whole matrix: the same values a call packs itself, so
// the same bits). Other paths read weight[] and ignore packs.
enum class GroupedPack { forward, backward_input };
// uint32 elements of one (OC, C) weight packed for `which`.
size_t grouped_bf16_packed_size(GroupedPack which, int C, int OC);
// dst (grouped_bf16_packed_size) = weight (OC, C) packed for `which`.
void grouped_bf16_pack(uint32_t* dst, GroupedPack which, const bf16* weight, int C, int OC);
// Whether the bf16 calls read packs now: on the AMX and AVX512-BF16 paths, unless a
// ScopedGroupedGemmPacks turned them off.
bool grouped_bf16_reads_packs();

// Turns the reading of packs off (or on) for the whole process while it lives: the tests
// compare the packed path with the per-call packing. Training never sets it.
class ScopedGroupedGemmPacks {
 public:
  explicit ScopedGroupedGemmPacks(bool on);
  ~ScopedGroupedGemmPacks();
  ScopedGroupedGemmPacks(const ScopedGroupedGemmPacks&) = delete;
  ScopedGroupedGemmPacks& operator=(const ScopedGroupedGemmPacks&) = delete;

 private:
  bool saved_;
};

// How the grouped GEMMs run. Each precision picks the fastest path its CPU has at run time
// (grouped_gemm_default_path: fp32 loop, as measured; bf16 amx, else avx512_bf16, else loop):
//   amx          bf16: AMX tiles (grouped_gemm_amx.cpp)
//   avx512_bf16  bf16: AVX512-BF16 dot products on zmm registers (grouped_gemm_avx512_bf16.cpp)
//   avx512       fp32: AVX-512 FMA on zmm registers (grouped_gemm_fp32.cpp)
//   loop         one matmul.h / matmul_bf16.h (oneDNN) call per group: fp32 by default (oneDNN's
//                sgemm is ahead of the avx512 kernel at the measured shapes), bf16 with
//                AVX-512 but neither of the above; and the baseline of bench_experts
//   portable     plain C++ loops (grouped_gemm_portable.cpp): any CPU, any build
enum class GroupedGemmPath { portable, loop, avx512, avx512_bf16, amx };

// Whether a precision's path can run on this CPU (and build): portable always; loop for
// fp32 always, for bf16 where oneDNN runs bf16 matmuls; avx512 fp32 only; the others bf16.
bool grouped_gemm_path_available(bool bf16, GroupedGemmPath path);
// The path of each precision on this CPU by default, and now (ScopedGroupedGemmPath).
GroupedGemmPath grouped_gemm_default_path(bool bf16);
GroupedGemmPath grouped_gemm_path(bool bf16);
// "portable", "avx512", "avx512-bf16", "amx", or "loop:" + the GEMM routine of
// matmul_bf16_isa() / "loop:sgemm": the kernel a precision's calls run now.
std::string grouped_gemm_isa(bool bf16);

// Overrides one precision's path for the whole process while it lives (tests and benchmarks
// compare the paths; training never sets it). A path not available is refused (MT_CHECK).
class ScopedGroupedGemmPath {
 public:
  ScopedGroupedGemmPath(bool bf16, GroupedGemmPath path);
  ~ScopedGroupedGemmPath();
  ScopedGroupedGemmPath(const ScopedGroupedGemmPath&) = delete;
  ScopedGroupedGemmPath& operator=(const ScopedGroupedGemmPath&) = delete;

 private:
  bool bf16_;
  int saved_;
};

}  // namespace mt
