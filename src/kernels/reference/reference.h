// Naive twins of the kernels (same signatures, namespace mt::ref): plain loops accumulating
// in double, written for obviousness, not speed. Tests compare the fast kernels with these
// and check these against finite differences.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/rope.h"
#include "kernels/router.h"
#include "kernels/token_permutation.h"

namespace mt::ref {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC);
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int N, int C,
                           int OC);
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int N, int C, int OC);
void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
           const float* B, int ldb, float beta, float* C, int ldc);

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                              const float* mean, const float* rstd, int N, int C);
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int N, int C);

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps);
void rmsnorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                            const float* rstd, int N, int C);
void rmsnorm_backward_weight(float* dweight, const float* dout, const float* inp, const float* rstd,
                             int N, int C);
void swiglu_forward(float* out, const float* gu, int N, int F);
void swiglu_backward(float* dgu, const float* gu, const float* dout, int N, int F,
                     bool accumulate = true);
void rope_forward(float* x, int rows, size_t row_stride, int heads, int T, const int* positions,
                  const RopeTable& table);
void rope_backward(float* dx, int rows, size_t row_stride, int heads, int T, const int* positions,
                   const RopeTable& table);

void gelu_forward(float* out, const float* inp, size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int OC);

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH);

void crossentropy_forward(float* losses, const float* logits, const int* targets, int N, int V,
                          int ldv);
void crossentropy_forward_backward(float* losses, float* logits, const int* targets, float dloss,
                                   int N, int V, int ldv);

void embedding_forward(float* out, const int* idx, const float* wte, const float* wpe, int B, int T,
                       int C, int64_t vocab_start, int vocab_rows);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx, int B, int T,
                        int C, int64_t vocab_start, int vocab_rows);

void router_softmax(float* probs, const float* logits, int N, int E);
void router_sigmoid(float* scores, const float* logits, int N, int E);
void router_top_k(int32_t* experts, float* gates, const float* scores, const float* bias, int N,
                  int E, int k, RouterGates how);
inline void router_top_k(int32_t* experts, float* gates, const float* probs, const float* bias,
                         int N, int E, int k) {
  ref::router_top_k(experts, gates, probs, bias, N, E, k,
                    RouterGates::of(RouterScore::softmax, k, 1));
}
void router_choice_counts(int64_t* counts, const int32_t* experts, int N, int E, int k);
void router_share_sums(double* P, const float* scores, int N, int E, RouterScore score);
double router_aux_from_sums(float* f, const int64_t* counts, const double* P, int64_t tokens, int E,
                            int k, float alpha);
double router_aux_loss(float* f, const float* probs, const int32_t* experts, int N, int E, int k,
                       float alpha);
void router_backward(float* dlogits, const float* dgates, const float* scores,
                     const int32_t* experts, const float* gates, const float* f,
                     const RouterBackward& how, int N, int E, int k);
inline void router_backward(float* dlogits, const float* dgates, const float* probs,
                            const int32_t* experts, const float* gates, const float* f, float alpha,
                            float aux_scale, int N, int E, int k) {
  const RouterBackward how{RouterScore::softmax, RouterGates::of(RouterScore::softmax, k, 1), alpha,
                           aux_scale, N};
  ref::router_backward(dlogits, dgates, probs, experts, gates, f, how, N, E, k);
}

int plan_dispatch(int32_t* counts, int32_t* row_of, int32_t* row_token, const int32_t* experts,
                  int N, int E, int k, int capacity, const HeldChoices& held = {});
void gather_rows(float* dst, const float* src, const int32_t* index, int M, int C);
void gather_rows_scaled(float* dst, const float* src, const int32_t* row_of, const float* gates,
                        int N, int k, int C);
void combine_rows(float* y, const float* rows, const int32_t* row_of, const float* gates, int N,
                  int k, int C);
void combine_rows_backward_gates(float* dgates, const float* dy, const float* rows,
                                 const int32_t* row_of, int N, int k, int C);
void scatter_add_rows(float* dh, const float* rows, const int32_t* row_of, int N, int k, int C);
void regroup_blocks(float* dst, const float* src, const int32_t* counts, int S, int B, int C,
                    bool to_expert_major);

// Same float arithmetic as torch (the order is the specification), one element at a time.
void adamw_update(float* param, const float* grad, float* m, float* v, size_t n,
                  const AdamWParams& hp);

double sum_squares(const float* x, size_t n);
bool all_finite(const float* x, size_t n);
void scale_inplace(float* x, size_t n, float s);
void add_inplace(float* y, const float* x, size_t n);

}  // namespace mt::ref
