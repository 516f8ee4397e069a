// The experts of one mixture-of-experts layer on this rank, as the layer (moe_layer.h) sees
// them: a block of rows grouped by local expert in, a block of rows out, and the passes B
// and W. The layer picks the implementation once, at construction, by kind (GELU experts
// of the gpt2 MoE, §1; SwiGLU experts of the llama MoE, §9) and precision:
// expert_mlp_fp32.h or expert_mlp_bf16.h. Each registers this rank's experts' parameters
// (global names: transformer.h.{i}.mlp.experts.{e}.* or model.layers.{i}.mlp.experts.{e}.*)
// and reserves what its backward keeps in the microbatch's slot; how it multiplies is its
// own business. In both precisions the GEMMs go through expert_gemm.h: one grouped GEMM over
// all local experts (kernels/grouped_gemm.h), not one GEMM per expert.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "model/activation_pool.h"
#include "model/linear.h"
#include "model/param_table.h"

namespace mt {

// Rows of each local expert in an expert-major block: expert le owns rows
// [offset[le], offset[le + 1]). offset[0] may be above 0 (one part's region of the
// overlapped exchange, moe_parts.h): a call then works on the rows [first(), total()) of
// its buffers only, so P parts cost what one does (each row is converted and activated
// once, not once per part whose region lies above it).
struct ExpertGroups {
  const int32_t* offset;  // (count + 1)
  int count;
  int begin(int le) const { return offset[le]; }
  int rows(int le) const { return offset[le + 1] - offset[le]; }
  int first() const { return offset[0]; }                 // the block's first row
  int total() const { return offset[count]; }             // one past its last row
  int size() const { return offset[count] - offset[0]; }  // its rows
};

// The expert MLP of each architecture: gpt2's dense MLP (c_fc, tanh GELU, c_proj, with
// biases; §1) or llama's SwiGLU (gate_proj, up_proj, down_proj, no biases; §9).
enum class ExpertKind { gelu, swiglu };

// The shape of one layer's local experts.
struct ExpertShape {
  ExpertKind kind = ExpertKind::gelu;
  std::string prefix;  // "transformer.h.{i}.mlp." or "model.layers.{i}.mlp."
  int dim = 0;         // C: rows in and out
  int hidden = 0;      // H: each expert's hidden width
  int first = 0;       // global index of this rank's first expert
  int count = 0;       // local experts
  int max_rows = 0;    // rows the local experts can receive per microbatch (slot sizing)
  int max_tokens = 0;  // tokens per microbatch
  float proj_std = 0;  // init std of c_proj / down_proj (docs/contracts.md §1, §9a)
  // Each rank's gradients cover only its tokens (tensor parallelism's token split,
  // moe_layer.h): ParamInfo::tp_partial_grad.
  bool partial_grads = false;
  bool dry = false;  // a dry run (model/dry_model.h): arenas without memory
};

class ExpertMlp {
 public:
  virtual ~ExpertMlp() = default;
  virtual void bind(float* params, float* grads) = 0;

  // Where the layer leaves forward's input rows (fp32, expert-major), so they need no copy:
  // in the slot where they are kept for W, or in the caller's `scratch` (as many rows) when
  // the slot keeps them in another form.
  virtual float* input_rows(float* slot, float* scratch) const = 0;
  // Where the rows do not travel (ep = 1, TokenExchange::moves_rows false) the expert-sorted
  // rows are the experts' rows: forward's input is packed straight from the tokens, row
  // p = h[index[p]] for p < M, in the form the slot keeps it (bf16: rounded once), with no
  // fp32 block of the M rows in between. forward then takes x = nullptr.
  virtual void gather_input(float* slot, const float* h, const int32_t* index, int M) = 0;
  // y (rows of g, C) = expert_e(x) for each group's rows; x is input_rows' (nullptr: the
  // rows gather_input packed). y may be x's scratch: x is read before y is written.
  virtual void forward(float* slot, const ExpertGroups& g, const float* x, float* y) = 0;
  // As input_rows, for backward_input's output gradient rows.
  virtual float* grad_rows(float* slot, float* scratch) const = 0;
  // As gather_input, for the output gradients, in the same pass as the gates' gradients
  // (kernels/token_permutation.h, combine_rows_backward): dgates (N, k) and the rows
  // gates * dy[token] from dy (N, C) and the experts' outputs y_rows (M, C).
  virtual void gather_grad(float* slot, float* dgates, const float* dy, const float* y_rows,
                           const int32_t* row_of, const float* gates, int N, int k) = 0;
  // dx (rows of g, C) = the input gradient of each row (overwritten) from dy, grad_rows'
  // (nullptr: the rows gather_grad packed); keeps in the slot what backward_weight needs.
  // dx may be dy's scratch.
  virtual void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) = 0;
  // The layer's sums over each token's rows (the gate-weighted combine, the scatter-add of
  // the input gradients) take the rows in row order (bf16, kernels/token_permutation.h's
  // *_in_row_order) or in the order of the token's choices (fp32).
  virtual bool sums_in_row_order() const { return false; }
  // Whether the two calls below run now: where nothing travels, the experts' last GEMM
  // sums each row into its token as its block leaves the tiles (grouped_gemm.h,
  // *_into_tokens), the bits of the row-order sums over the rows (bf16 SwiGLU experts on
  // the AMX path in a one-thread team).
  virtual bool sums_into_tokens() const { return false; }
  // forward on the rows gather_input packed, y_rows (rows of g, C) as forward's y, and
  // tokens (N, C) = per token the sum of gate[r] * y_rows[r] over its rows r (token[r]: the
  // row's token; overwritten).
  virtual void forward_into_tokens(float* slot, const ExpertGroups& g, float* y_rows, float* tokens,
                                   const int32_t* token, const float* gate, int N);
  // backward_input on the rows gather_grad packed, and tokens (N, C) = per token the sum of
  // its rows' input gradients (overwritten); the rows themselves are not stored.
  virtual void backward_input_into_tokens(float* slot, const ExpertGroups& g, float* tokens,
                                          const int32_t* token, int N);
  // Weight gradients (+=) from the slot over the rows of `count` blocks: every part's
  // region at once under --moe-overlap-parts (moe_parts.h), so each weight gradient is read
  // and written once per pass, not once per part. No communication.
  virtual void backward_weight(float* slot, const ExpertGroups* g, int count) = 0;
  void backward_weight(float* slot, const ExpertGroups& g) { backward_weight(slot, &g, 1); }

  // --precision bf16: floats of the fp32 stage the experts round their results through
  // (shared with the chunk's other layers; set before the first forward), and the bytes of
  // their bf16 weight copies. None in fp32.
  virtual size_t stage_floats() const { return 0; }
  virtual void set_stage(float*) {}
  virtual size_t weight_copy_bytes() const { return 0; }
  // Floats of the arenas the experts hold themselves (outside the slot and the stage).
  virtual size_t own_workspace_floats() const { return 0; }
  // Bytes the experts' kernels keep in thread_local buffers outside every arena (each lives
  // as long as its thread and grows to its largest call; kernels/grouped_gemm.h states the
  // bounds): per OpenMP thread of the rank, and once on the rank's own thread, which calls
  // the weight gradients. parts: --moe-overlap-parts (several parts' rows are gathered).
  struct KernelScratch {
    size_t per_thread = 0, per_rank = 0;
  };
  virtual KernelScratch kernel_scratch(int /*parts*/) const { return {}; }
};

// The parameters of the local experts of either kind, registered in the file format's order,
// for either precision. Both kinds are two Linears around an elementwise activation:
//   gelu (§1, each the dense MLP):  up = c_fc (H, C) with bias, tanh GELU with c_fc's bias,
//                                   down = c_proj (C, H) with bias;
//   swiglu (§9):                    up = [gate_proj; up_proj] (2H, C) (placed one after the
//                                   other: one matrix, one GEMM, as the dense llama MLP),
//                                   h = silu(gate) * up, down = down_proj (C, H), no biases.
// The activation's input is up's output, U = up_width() wide; its output is H wide.
class ExpertWeights : public ExpertMlp {
 public:
  ExpertWeights(const ExpertShape& shape, ParamTable& table);
  void bind(float* params, float* grads) override;

 protected:
  int up_width() const { return kind_ == ExpertKind::swiglu ? 2 * H_ : H_; }
  bool biased() const { return kind_ == ExpertKind::gelu; }
  // act (rows, H) = the activation of pre (rows, U), over the rows of an expert-major block
  // (g's, from g.first()); gelu first adds each expert's c_fc bias to pre (kept so, for the
  // backward). bf16: act rounded as it is stored.
  void activate(float* act, float* pre, const ExpertGroups& g) const;
  void activate(bf16* act, float* pre, const ExpertGroups& g) const;
  // d_pre (rows, U) = the activation's input gradient from d_act (rows, H), overwritten;
  // under gelu d_act may be d_pre.
  void activation_backward(float* d_pre, const float* pre, const float* d_act, int rows) const;
  void activation_backward(bf16* d_pre, const float* pre, const float* d_act, int rows) const;
  // The weight gradients' gather buffer over several parts, for the larger of the two
  // Linears' rows (every row at worst), in elements of element_bytes.
  size_t gather_scratch_bytes(int parts, size_t element_bytes) const;

  ExpertKind kind_;
  int C_, H_, El_;
  int max_rows_;
  std::vector<Linear> up_, down_;  // per local expert: (U, C) and (C, H)
};

// The experts of shape.kind in this precision: bf16 when bf16_version is non-null (the
// model's weight version, GPT::weights_changed), else fp32.
std::unique_ptr<ExpertMlp> make_experts(const ExpertShape& shape, const uint64_t* bf16_version,
                                        ParamTable& table, SlotLayout& layout);

}  // namespace mt
