// The experts of one mixture-of-experts layer on this rank, as the layer (moe_layer.h) sees
// them: a block of rows grouped by local expert in, a block of rows out, and the passes B
// and W. The layer picks the implementation once, at construction, by kind (GELU experts
// of the gpt2 MoE, §1; SwiGLU experts of the llama MoE, §9) and precision:
// expert_mlp_fp32.h or expert_mlp_bf16.h. Each registers this rank's experts' parameters
// (global names: transformer.h.{i}.mlp.experts.{e}.* or model.layers.{i}.mlp.experts.{e}.*)
// and reserves what its backward keeps in the microbatch's slot; how it multiplies is its
// own business. In fp32 the GEMMs go through expert_gemm.h, the seam where one grouped GEMM
// over all local experts replaces the loop of one GEMM per expert.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/activation_pool.h"
#include "model/linear.h"
#include "model/param_table.h"

namespace mt {

// Rows of each local expert in an expert-major block: expert le owns rows
// [offset[le], offset[le + 1]). offset[0] may be above 0 (one part's region of the
// overlapped exchange, moe_parts.h): a call may then use the rows below offset[0] as
// scratch, but leaves every row from offset[count] on untouched.
struct ExpertGroups {
  const int32_t* offset;  // (count + 1)
  int count;
  int begin(int le) const { return offset[le]; }
  int rows(int le) const { return offset[le + 1] - offset[le]; }
  int total() const { return offset[count]; }
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
  // y (g.total(), C) = expert_e(x) for each group's rows; x is input_rows'. y may be x's
  // scratch: x is read before y is written.
  virtual void forward(float* slot, const ExpertGroups& g, const float* x, float* y) = 0;
  // As input_rows, for backward_input's output gradient rows.
  virtual float* grad_rows(float* slot, float* scratch) const = 0;
  // dx (g.total(), C) = the input gradient of each row (overwritten) from dy, grad_rows';
  // keeps in the slot what backward_weight needs. dx may be dy's scratch.
  virtual void backward_input(float* slot, const ExpertGroups& g, const float* dy, float* dx) = 0;
  // Weight gradients (+=) from the slot. No communication.
  virtual void backward_weight(float* slot, const ExpertGroups& g) = 0;

  // --precision bf16: floats of the fp32 stage the experts round their results through
  // (shared with the chunk's other layers; set before the first forward), and the bytes of
  // their bf16 weight copies. None in fp32.
  virtual size_t stage_floats() const { return 0; }
  virtual void set_stage(float*) {}
  virtual size_t weight_copy_bytes() const { return 0; }
  // Floats of the arenas the experts hold themselves (outside the slot and the stage).
  virtual size_t own_workspace_floats() const { return 0; }
};

// The GELU experts of docs/contracts.md §1 (each the dense MLP: c_fc, tanh GELU, c_proj, with
// biases): their parameters, registered in the file format's order, for either precision.
class GeluExperts : public ExpertMlp {
 public:
  GeluExperts(const ExpertShape& shape, ParamTable& table);
  void bind(float* params, float* grads) override;

 protected:
  int C_, H_, El_;
  std::vector<Linear> fc_, proj_;  // per local expert
};

// The SwiGLU experts of §9 (gate_proj and up_proj placed one after the other, so each
// expert's [gate; up] is one (2H, C) matrix and one GEMM, as the dense llama MLP), for
// either precision.
class SwigluExperts : public ExpertMlp {
 public:
  SwigluExperts(const ExpertShape& shape, ParamTable& table);
  void bind(float* params, float* grads) override;

 protected:
  int C_, H_, El_;
  std::vector<Linear> gate_up_, down_;  // per local expert: (2H, C) and (C, H)
};

// The experts of shape.kind in this precision: bf16 when bf16_version is non-null (the
// model's weight version, GPT::weights_changed), else fp32.
std::unique_ptr<ExpertMlp> make_experts(const ExpertShape& shape, const uint64_t* bf16_version,
                                        ParamTable& table, SlotLayout& layout);

}  // namespace mt
