#include "step_kernel_table.h"

#include <algorithm>
#include <cstring>

#include "bench_util.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/reduce.h"

namespace mt::bench {

KernelTable::KernelTable(const StepConfig& bc, bool bf16) : bc_(bc), bf16_(bf16) {
  const int C = bc.dim, H = 4 * C, N = bc.batch * bc.seq, V = bc.vocab;
  const size_t big = size_t(N) * std::max(H, V);
  x = filled(big, 1.0f, 1), y = filled(big, 1.0f, 2), dy = filled(big, 0.1f, 3);
  dx = filled(big, 0.0f, 4), qkv = filled(size_t(N) * 3 * C, 1.0f, 5);
  dqkv = filled(size_t(N) * 3 * C, 0.0f, 6);
  w = filled(size_t(H) * std::max(C, V), 0.02f, 7), dw = filled(w.size(), 0.0f, 8);
  bias = filled(size_t(H), 0.02f, 9), dbias = filled(size_t(H), 0.0f, 10);
  att = filled(size_t(bc.batch) * bc.heads * bc.seq * bc.seq, 0.0f, 11);
  scratch.resize(attention_backward_scratch_floats(bc.batch, bc.seq, C, bc.heads));
  wpe = filled(size_t(bc.seq) * C, 0.02f, 15), dwpe = filled(wpe.size(), 0.0f, 16);
  zeroed.resize(size_t(N) * (H + 5 * C));
  mean.resize(N), rstd.resize(N), losses.resize(N), idx.resize(N);
  for (int n = 0; n < N; n++) idx[n] = (n * 7) % V;
  logits = filled(size_t(N) * V, 4.0f, 12);
  P = GPT(model_config(bc), GPT::whole_model(model_config(bc)), TensorParallelShard{}, 1)
          .table()
          .total();
  p = filled(P, 0.02f, 13), g = filled(P, 0.001f, 14), m.assign(P, 0.0f), v.assign(P, 0.0f);
  x16.resize(big), dy16.resize(big), w16.resize(w.size());
  to_bf16(x16.data(), x.data(), big), to_bf16(dy16.data(), dy.data(), big);
  to_bf16(w16.data(), w.data(), w.size());
  // The attention forward fills att with valid probabilities for the backward.
  attention_forward(y.data(), att.data(), qkv.data(), bc.batch, bc.seq, C, bc.heads);
}

std::vector<KernelCall> KernelTable::calls() {
  const int C = bc_.dim, H = 4 * C;
  std::vector<KernelCall> out;
  for (auto&& rows : {linear("qkv", C, 3 * C, true), linear("attn_proj", C, C, true),
                      linear("fc", C, H, false), linear("mlp_proj", H, C, true), attention(),
                      norms_and_activations(), bf16_conversions(), head_embedding_and_optimizer()})
    out.insert(out.end(), rows.begin(), rows.end());
  return out;
}

// One linear layer's three GEMMs, once per block.
std::vector<KernelCall> KernelTable::linear(const char* name, int in, int out, bool b) {
  const int N = bc_.batch * bc_.seq, L = bc_.layers;
  const double f = 2.0 * double(N) * in * out;
  const std::string n = name;
  if (bf16_)
    return {{n + " fwd bf16", L, f,
             [=, this] {
               matmul_bf16_forward(y.data(), x16.data(), w16.data(), b ? bias.data() : nullptr, N,
                                   in, out);
             }},
            {n + " bwd_input bf16", L, f,
             [=, this] {
               matmul_bf16_backward_input(dx.data(), dy16.data(), w16.data(), N, in, out, false);
             }},
            {n + " bwd_weight bf16", L, f, [=, this] {
               matmul_bf16_backward_weight(dw.data(), dbias.data(), dy16.data(), x16.data(), N, in,
                                           out);
             }}};
  return {{n + " fwd", L, f,
           [=, this] {
             matmul_forward(y.data(), x.data(), w.data(), b ? bias.data() : nullptr, N, in, out);
           }},
          {n + " bwd_input", L, f,
           [=, this] { matmul_backward_input(dx.data(), dy.data(), w.data(), N, in, out); }},
          {n + " bwd_weight", L, f, [=, this] {
             matmul_backward_weight(dw.data(), dbias.data(), dy.data(), x.data(), N, in, out);
           }}};
}

// The attention core, fp32 or the bf16 products (kernels/attention.h) as --precision runs it.
std::vector<KernelCall> KernelTable::attention() {
  const int C = bc_.dim, L = bc_.layers, B = bc_.batch, T = bc_.seq, NH = bc_.heads;
  // Full (non-causal) attention FLOPs, as MFU counts them: 4 T^2 C forward, 8 T^2 C backward.
  const double af = 4.0 * B * double(T) * T * C;
  if (bf16_)
    return {{"attention fwd bf16", L, af,
             [=, this] { attention_forward_bf16(y.data(), att.data(), qkv.data(), B, T, C, NH); }},
            {"attention bwd bf16", L, 2 * af, [=, this] {
               attention_backward_bf16(dqkv.data(), scratch.data(), dy.data(), qkv.data(),
                                       att.data(), B, T, C, NH);
             }}};
  return {{"attention fwd", L, af,
           [=, this] { attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH); }},
          {"attention bwd", L, 2 * af, [=, this] {
             attention_backward(dqkv.data(), scratch.data(), dy.data(), qkv.data(), att.data(), B,
                                T, C, NH);
           }}};
}

// LayerNorm, GELU, the residual adds and the backward's zeroing and copies.
std::vector<KernelCall> KernelTable::norms_and_activations() {
  const int C = bc_.dim, H = 4 * C, N = bc_.batch * bc_.seq, L = bc_.layers;
  std::vector<KernelCall> out = {
      {"layernorm fwd", 2 * L + 1, 0,
       [=, this] {
         layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N,
                           C);
       }},
      {"layernorm bwd_input", 2 * L + 1, 0,
       [=, this] {
         layernorm_backward_input(dx.data(), dy.data(), x.data(), w.data(), mean.data(),
                                  rstd.data(), N, C);
       }},
      {"layernorm bwd_weight", 2 * L + 1, 0, [=, this] {
         layernorm_backward_weight(dw.data(), dbias.data(), dy.data(), x.data(), mean.data(),
                                   rstd.data(), N, C);
       }}};
  if (bf16_) {  // the GELU kernels write the bf16 GEMM inputs themselves
    out.push_back({"bias_gelu fwd bf16", L, 0, [=, this] {
                     bias_gelu_forward_bf16(x16.data(), dx.data(), bias.data(), N, H);
                   }});
    out.push_back({"gelu bwd bf16", L, 0, [=, this] {
                     gelu_backward_bf16(dy16.data(), x.data(), dy.data(), size_t(N) * H);
                   }});
  } else {
    out.push_back({"bias_gelu fwd", L, 0,
                   [=, this] { bias_gelu_forward(y.data(), dx.data(), bias.data(), N, H); }});
    out.push_back({"gelu bwd", L, 0,
                   [=, this] { gelu_backward(dx.data(), x.data(), dy.data(), size_t(N) * H); }});
  }
  out.push_back(
      {"residual add", 2 * L, 0, [=, this] { add_inplace(y.data(), x.data(), size_t(N) * C); }});
  // block.cpp's backward zeroes d_fc, d_ln2, d_att_out, d_qkv, d_ln1 and copies the
  // residual gradient twice; the head zeroes two (N, C) buffers.
  out.push_back({"memset/memcpy (block bwd)", L, 0, [=, this] {
                   std::memset(zeroed.data(), 0, zeroed.size() * sizeof(float));
                   std::memcpy(y.data(), x.data(), size_t(N) * 2 * C * sizeof(float));
                 }});
  return out;
}

// bf16 only: per block to_bf16 rounds the two row-parallel output gradients (N C each)
// twice, for B and for W; every other bf16 GEMM input is rounded by the kernel that makes it
// (LayerNorm, attention, GELU above). And one weight conversion per step of each matrix
// (12 C^2 per block).
std::vector<KernelCall> KernelTable::bf16_conversions() {
  if (!bf16_) return {};
  const int C = bc_.dim, L = bc_.layers;
  const size_t nc = size_t(bc_.batch) * bc_.seq * C;
  return {{"bf16 conversions (block)", L, 0,
           [=, this] {
             for (int k = 0; k < 4; ++k) to_bf16(x16.data(), y.data(), nc);
           }},
          {"bf16 weight copies (4 C^2)", 3 * L, 0,
           [=, this] { to_bf16(w16.data(), w.data(), size_t(4) * C * C); }}};
}

// The LM head and its loss, the embedding, and the optimizer's passes over every parameter.
std::vector<KernelCall> KernelTable::head_embedding_and_optimizer() {
  const int C = bc_.dim, N = bc_.batch * bc_.seq, V = bc_.vocab, B = bc_.batch, T = bc_.seq;
  const double hf = 2.0 * double(N) * C * V;
  return {
      {"lm_head fwd", 1, hf,
       [=, this] { matmul_forward(logits.data(), x.data(), w.data(), nullptr, N, C, V); }},
      {"lm_head bwd_input", 1, hf,
       [=, this] { matmul_backward_input(dx.data(), logits.data(), w.data(), N, C, V); }},
      {"lm_head bwd_weight", 1, hf,
       [=, this] { matmul_backward_weight(dw.data(), nullptr, logits.data(), x.data(), N, C, V); }},
      {"crossentropy fwd+bwd", 1, 0,
       [=, this] {
         crossentropy_forward_backward(losses.data(), logits.data(), idx.data(), 1.0f / N, N, V, V);
       }},
      {"embedding fwd", 1, 0,
       [=, this] { embedding_forward(y.data(), idx.data(), w.data(), wpe.data(), B, T, C, 0, V); }},
      {"embedding bwd", 1, 0,
       [=, this] {
         embedding_backward(dw.data(), dwpe.data(), dy.data(), idx.data(), B, T, C, 0, V);
       }},
      {"zero grads", 1, 0, [=, this] { std::memset(g.data(), 0, P * sizeof(float)); }},
      {"grad norm", 1, 0, [=, this] { (void)sum_squares(g.data(), P); }},
      {"adamw", 1, 0, [=, this] {
         adamw_update(p.data(), g.data(), m.data(), v.data(), P,
                      AdamWParams{1e-4, 0.9, 0.95, 1e-8, 0.1, 1});
       }}};
}

}  // namespace mt::bench
