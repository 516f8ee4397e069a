// The local experts' GEMMs over an expert-major block of rows (expert le owns rows
// [g.begin(le), g.begin(le) + g.rows(le))): each one grouped GEMM over every local expert
// (kernels/grouped_gemm.h), whose path each precision picks (in fp32 that is oneDNN's sgemm
// per expert, measured faster there; in bf16 the grouped AMX or AVX512-BF16 kernels). Each
// expert's matrix is
// one Linear of the same (in, out) shape, so the weight pointers and the row offsets are all
// the kernel needs; the biases (the GELU experts') are added and summed here, per expert.
//
// Bits: on the grouped kernels' own paths a row's output depends on that row and its
// expert's weight only, not on the other rows, so every layout (ep, tp's token split, the
// row pieces of for_each_row_piece) gives the same rows the same bits; a weight gradient
// sums an expert's rows in row order. On the loop (fp32's default) oneDNN may pick its
// kernel by a group's row count: layouts then agree to rounding; one layout is still the
// same bits run after run (recomputation, resumes).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bf16_weight.h"
#include "kernels/grouped_gemm.h"
#include "model/expert_mlp.h"
#include "model/linear.h"

namespace mt {

// y (g.total(), out) = x_e (rows, in) @ W_e^T (+ b_e when with_bias) for every expert.
void expert_gemm_forward(float* y, const float* x, const std::vector<Linear>& w,
                         const ExpertGroups& g, bool with_bias);
// dx (g.total(), in) (+)= dy_e (rows, out) @ W_e for every expert (overwritten unless
// accumulate).
void expert_gemm_backward_input(float* dx, const float* dy, const std::vector<Linear>& w,
                                const ExpertGroups& g, bool accumulate);
// dW_e += dy_e^T @ x_e (and db_e += column sums of dy_e when with_bias) for every expert,
// over the rows of `count` blocks (the parts of moe_parts.h, or one block): each dW_e is
// read and written once whatever the count (grouped_matmul_backward_weight_segments).
void expert_gemm_backward_weight(const std::vector<Linear>& w, const float* dy, const float* x,
                                 const ExpertGroups* g, int count, bool with_bias);

// The bf16 copies of the experts' weights of one kind of Linear (kernels/bf16_weight.h:
// converted once per change of the weights), and on the AMX and AVX512-BF16 paths their packed
// copies (kernels/grouped_gemm.h, GroupedPack): each layout packed from the bf16 copies at its
// first use after a change of the weights (the model's version, bumped by whoever writes
// them: GPT::weights_changed after an optimizer step or a load), then read by every
// forward, input gradient, part (--moe-overlap-parts) and recomputation until the next
// change. Packed from the bf16 copies, not from the fp32 weights: under ZeRO-3 the gathered
// buffer may be gone by the backward, the copies are not.
class Bf16ExpertWeights {
 public:
  Bf16ExpertWeights(const std::vector<Linear>& w, const uint64_t* version);
  // The copies of w (the Linears given at construction, bound), converted if they changed.
  const std::vector<const bf16*>& get(const std::vector<Linear>& w);
  // The packs of w for `which`, packed if the weights changed since; null where the calls
  // pack per call (not the AMX or AVX512-BF16 path, grouped_bf16_reads_packs).
  const uint32_t* const* packed(const std::vector<Linear>& w, GroupedPack which);
  // The copies' bytes and both packs': counted whatever the CPU, so that an estimate does
  // not depend on the machine that makes it (the planner's plans).
  size_t bytes() const;
  // The bytes one expert's Linear (in -> out) adds to bytes().
  static size_t expert_bytes(int in, int out);
  // Layouts packed so far (each of the two, once per change of the weights used).
  int64_t packs() const { return packs_; }

 private:
  struct Packs {
    std::vector<std::vector<uint32_t>> data;  // per expert, from the first pack on
    std::vector<const uint32_t*> pointers;
    uint64_t version = ~uint64_t(0);  // of the weights packed (none yet)
  };

  std::vector<Bf16Weight> copies_;
  std::vector<const bf16*> pointers_;
  const uint64_t* version_;
  int in_ = 0, out_ = 0;
  Packs packs_of_[2];  // GroupedPack::forward, backward_input
  int64_t packs_ = 0;
};

// The same in bf16: bf16 rows and weight copies, fp32 accumulation and results; the bias
// (fp32) and its gradient (fp32 sums of the bf16 dy) as in fp32.
void expert_gemm_forward(float* y, const bf16* x, const std::vector<Linear>& w,
                         Bf16ExpertWeights& w16, const ExpertGroups& g, bool with_bias);
void expert_gemm_backward_input(float* dx, const bf16* dy, const std::vector<Linear>& w,
                                Bf16ExpertWeights& w16, const ExpertGroups& g, bool accumulate);
void expert_gemm_backward_weight(const std::vector<Linear>& w, const bf16* dy, const bf16* x,
                                 const ExpertGroups* g, int count, bool with_bias);

// The SwiGLU experts' two GEMMs beside their activation, with SwiGLU in the GEMM's store
// (grouped_gemm.h, *_swiglu; the unfused composition's bits): up (in C, out 2H) gives
// gu = x up^T and act = swiglu(gu); down (in H, out C) gives d_gu = swiglu'(gu, dy down),
// d_act never stored on the AMX path.
void expert_gemm_forward_swiglu(float* gu, bf16* act, const bf16* x, const std::vector<Linear>& up,
                                Bf16ExpertWeights& up16, const ExpertGroups& g);
void expert_gemm_backward_input_swiglu(bf16* d_gu, const float* gu, const bf16* dy,
                                       const std::vector<Linear>& down, Bf16ExpertWeights& down16,
                                       const ExpertGroups& g);

// The down and up GEMMs with their rows summed into token rows in the store (grouped_gemm.h,
// *_into_tokens; where grouped_bf16_sums_into_tokens()): forward adds gate[r] * y_r to
// tokens[token[r]] and keeps y_r in y; backward_input adds dx_r to tokens[token[r]].
void expert_gemm_forward_into_tokens(float* tokens, const int32_t* token, const float* gate,
                                     float* y, const bf16* x, const std::vector<Linear>& w,
                                     Bf16ExpertWeights& w16, const ExpertGroups& g);
void expert_gemm_backward_input_into_tokens(float* tokens, const int32_t* token, const bf16* dy,
                                            const std::vector<Linear>& w, Bf16ExpertWeights& w16,
                                            const ExpertGroups& g);

// Calls f(r0, rows, piece) over the block's rows [g.first(), g.total()) in pieces of at most
// `most` rows, piece the groups of rows [r0, r0 + rows) (offsets from r0): for work that
// goes through a buffer of `most` rows.
template <typename F>
void for_each_row_piece(const ExpertGroups& g, int most, F&& f) {
  std::vector<int32_t> offset(size_t(g.count) + 1);
  for (int r0 = g.first(); r0 < g.total(); r0 += most) {
    const int r1 = std::min(g.total(), r0 + most);
    for (int le = 0; le <= g.count; ++le) offset[le] = std::clamp(g.offset[le], r0, r1) - r0;
    f(r0, r1 - r0, ExpertGroups{offset.data(), g.count});
  }
}

}  // namespace mt
