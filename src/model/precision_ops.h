// The steps of the model's layers that differ by --precision (precision.h,
// docs/precision.md), under one set of names, so that each layer's forward and backward is
// one body written over `Ops` (a template parameter) instead of an fp32 twin and a bf16 twin.
//
// Ops::Act is what the slot keeps of a tensor that only GEMMs read (a LayerNorm or GELU
// output, an attention output, a column-parallel linear's output gradient): float under
// Fp32Ops, bf16 under Bf16Ops. Every step computes in fp32; Bf16Ops rounds a result bound
// for an Act buffer as it stores it (fused kernels where they exist, else through `stage`),
// and feeds the GEMMs bf16 operands with fp32 accumulation. Fp32Ops makes exactly the calls
// the fp32 layers always made, so fp32 stays bit for bit what it was.
//
// The buffers an op may use during one call are the chunk's, shared by its layers (every
// use ends inside the call): `scratch` (N, C) fp32 for sequence parallelism's gathers and
// partial sums; under bf16 `gather` (bf16 GEMM operands gathered or rounded for one call)
// and `stage` (fp32 results before they are rounded into the slot).
#pragma once

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/swiglu.h"
#include "model/activation_pool.h"
#include "tensor_parallel/column_parallel_linear.h"
#include "tensor_parallel/row_parallel_linear.h"

namespace mt {

// Reserves `count` values of a GEMM-only buffer: bf16 under --precision bf16, else fp32.
inline size_t reserve_gemm_operand(SlotLayout& layout, size_t count, bool bf16) {
  return bf16 ? layout.reserve_bf16(count) : layout.reserve(count);
}

// A layer's share of the chunk's workspaces (see above); stage and gather only under bf16.
struct LayerScratch {
  float* scratch = nullptr;
  float* stage = nullptr;
  bf16* gather = nullptr;
};

struct Fp32Ops {
  using Act = float;
  float* scratch;

  static Act* act(float* slot, size_t off) { return slot + off; }
  // Where an fp32 result bound for the Act buffer dst is computed: dst itself, so keeping
  // it there (keep) has nothing left to do.
  float* staged(Act* dst) const { return dst; }
  void keep(Act*, const float*, size_t) const {}
  // A GEMM operand made of fp32 values (n of them): the values themselves.
  const Act* operand(const float* x, size_t) const { return x; }
  Act* gathered() const { return scratch; }

  void layernorm(Act* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                 int N, int C) const {
    layernorm_forward(out, mean, rstd, x, w, b, N, C);
  }
  // x += res, then out = layernorm(x) (the block's residual add folded into its next norm).
  void add_layernorm(Act* out, float* mean, float* rstd, float* x, const float* res, const float* w,
                     const float* b, int N, int C) const {
    add_layernorm_forward(out, mean, rstd, x, res, w, b, N, C);
  }
  // out (N, F) = silu(gate) * up from gu (N, 2F) = [gate | up] rows; dgu from dout (overwritten).
  void swiglu(Act* out, const float* gu, int N, int F) const { swiglu_forward(out, gu, N, F); }
  void swiglu_backward(Act* dgu, const float* gu, const float* dout, int N, int F) const {
    mt::swiglu_backward(dgu, gu, dout, N, F, /*accumulate=*/false);
  }
  // att: what the backward needs, in the form `saved` (kernels/attention.h).
  void attention(Act* out, float* att, const float* qkv, int B, int T, int C, int NH,
                 AttentionSaved saved) const {
    attention_forward(out, att, qkv, B, T, C, NH, saved);
  }
  // dqkv (B, T, 3C) = the attention core's input gradient (overwritten: the kernel stores
  // each element's first contribution, the bits of a memset then +=, without that pass).
  void attention_backward(Act* dqkv, float* att_scratch, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH,
                          AttentionSaved saved) const {
    mt::attention_backward(dqkv, att_scratch, dout, qkv, att, B, T, C, NH, saved,
                           /*accumulate=*/false);
  }

  void forward(const tp::ColumnParallelLinear& l, float* y, const Act* x, int N, Act* gathered,
               bool with_bias = true) const {
    l.forward(y, x, N, gathered, with_bias);
  }
  void forward(const tp::RowParallelLinear& l, float* y, const Act* x, int N) const {
    l.forward(y, x, N, scratch);
  }
  // The GPT MLP's fc and GELU: pre (N, H) = x @ w^T + b, kept; act = gelu(pre).
  void forward_gelu(const tp::ColumnParallelLinear& l, float* pre, Act* act, const Act* x, int N,
                    Act* gathered) const {
    l.forward(pre, x, N, gathered, /*with_bias=*/false);
    bias_gelu_forward(act, pre, l.bias(), N, l.out());
  }
  void backward_input(const tp::ColumnParallelLinear& l, float* dx, const Act* dy, int N) const {
    l.backward_input(dx, dy, N, scratch);
  }
  void backward_input(const tp::RowParallelLinear& l, float* dx, const float* dy, int N) const {
    l.backward_input(dx, dy, N, scratch);
  }
  // The MLP's projection back through GELU: dx (N, H) = gelu'(pre) * (dy @ w).
  void backward_input_dgelu(const tp::RowParallelLinear& l, Act* dx, const float* pre,
                            const float* dy, int N) const {
    l.backward_input(dx, dy, N, scratch);
    mt::gelu_backward(dx, pre, dx, size_t(N) * l.in());  // overwrites: dinp is dout
  }
  void backward_weight(const tp::ColumnParallelLinear& l, const Act* dy, const Act* x,
                       int N) const {
    l.backward_weight(dy, x, N, scratch);
  }
  void backward_weight(const tp::RowParallelLinear& l, const float* dy, const Act* x, int N) const {
    l.backward_weight(dy, x, N, scratch);
  }
  void backward_weight_gathered(const tp::ColumnParallelLinear& l, const Act* dy, const Act* x_full,
                                int N) const {
    l.backward_weight_gathered(dy, x_full, N);
  }
};

struct Bf16Ops {
  using Act = bf16;
  float* scratch;
  bf16* gather;
  float* stage;

  static Act* act(float* slot, size_t off) { return reinterpret_cast<bf16*>(slot + off); }
  float* staged(Act*) const { return stage; }
  void keep(Act* dst, const float* result, size_t n) const { to_bf16(dst, result, n); }
  // Rounded into `gather`, where the next GEMM reads them.
  const Act* operand(const float* x, size_t n) const {
    to_bf16(gather, x, n);
    return gather;
  }
  Act* gathered() const { return gather; }

  void layernorm(Act* out, float* mean, float* rstd, const float* x, const float* w, const float* b,
                 int N, int C) const {
    layernorm_forward_bf16(out, mean, rstd, x, w, b, N, C);
  }
  void add_layernorm(Act* out, float* mean, float* rstd, float* x, const float* res, const float* w,
                     const float* b, int N, int C) const {
    add_layernorm_forward_bf16(out, mean, rstd, x, res, w, b, N, C);
  }
  void swiglu(Act* out, const float* gu, int N, int F) const { swiglu_forward_bf16(out, gu, N, F); }
  void swiglu_backward(Act* dgu, const float* gu, const float* dout, int N, int F) const {
    swiglu_backward_bf16(dgu, gu, dout, N, F);
  }
  void attention(Act* out, float* att, const float* qkv, int B, int T, int C, int NH,
                 AttentionSaved saved) const {
    attention_forward_bf16_out16(out, stage, att, qkv, B, T, C, NH, AmxTiles::allow, saved);
  }
  // The fp32 output of the same bf16 products (selective recomputation's probabilities).
  void attention(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                 AttentionSaved saved) const {
    attention_forward_bf16(out, att, qkv, B, T, C, NH, AmxTiles::allow, saved);
  }
  void attention_backward(Act* dqkv, float* att_scratch, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH,
                          AttentionSaved saved) const {
    attention_backward_bf16_out16(dqkv, stage, att_scratch, dout, qkv, att, B, T, C, NH,
                                  AmxTiles::allow, saved);
  }

  void forward(const tp::ColumnParallelLinear& l, float* y, const Act* x, int N, Act* gathered,
               bool with_bias = true) const {
    l.forward_bf16(y, x, N, gathered, with_bias);
  }
  void forward(const tp::RowParallelLinear& l, float* y, const Act* x, int N) const {
    l.forward_bf16(y, x, N, scratch);
  }
  void forward_gelu(const tp::ColumnParallelLinear& l, float* pre, Act* act, const Act* x, int N,
                    Act* gathered) const {
    l.forward_gelu_bf16(pre, act, x, N, gathered);
  }
  void backward_input_dgelu(const tp::RowParallelLinear& l, Act* dx, const float* pre,
                            const float* dy, int N) const {
    l.backward_input_dgelu_bf16(dx, pre, dy, N, scratch, gather, stage);
  }
  void backward_input(const tp::ColumnParallelLinear& l, float* dx, const Act* dy, int N) const {
    l.backward_input_bf16(dx, dy, N, scratch);
  }
  void backward_input(const tp::RowParallelLinear& l, float* dx, const float* dy, int N) const {
    l.backward_input_bf16(dx, dy, N, scratch, gather);
  }
  // A row-parallel layer's output gradient already rounded to bf16 by the pass that formed it
  // (not under sequence parallelism: dy16 is the whole (N, out) gradient).
  void backward_input_rounded(const tp::RowParallelLinear& l, float* dx, const bf16* dy16,
                              int N) const {
    l.backward_input_bf16_rounded(dx, dy16, N);
  }
  void backward_weight_rounded(const tp::RowParallelLinear& l, const bf16* dy16, const Act* x,
                               int N) const {
    l.backward_weight_bf16_rounded(dy16, x, N);
  }
  void backward_weight(const tp::ColumnParallelLinear& l, const Act* dy, const Act* x,
                       int N) const {
    l.backward_weight_bf16(dy, x, N, gather);
  }
  void backward_weight(const tp::RowParallelLinear& l, const float* dy, const Act* x, int N) const {
    l.backward_weight_bf16(dy, x, N, scratch, gather);
  }
  void backward_weight_gathered(const tp::ColumnParallelLinear& l, const Act* dy, const Act* x_full,
                                int N) const {
    l.backward_weight_gathered_bf16(dy, x_full, N);
  }
};

// f(ops) with this precision's ops over the layer's scratch: the one runtime branch of a
// layer whose body is written once.
template <class F>
decltype(auto) with_precision_ops(bool bf16, const LayerScratch& s, F&& f) {
  if (bf16) return f(Bf16Ops{s.scratch, s.gather, s.stage});
  return f(Fp32Ops{s.scratch});
}

}  // namespace mt
