// The mixture-of-experts router (docs/contracts.md §1, MoE variant) as plain forward/backward
// functions on buffers; the layer (model/moe_layer.h) owns the router weight and runs its
// matmul. N tokens, E experts, k choices per token. Naive twins: kernels/reference/.
//
//   probs = softmax(logits) over E
//   choices: the k experts with the largest probs[e] + bias[e], in descending order of
//     that score, ties to the lower expert index (bias: aux-loss-free balancing, may be
//     null; it only selects, the gates use the unbiased probs)
//   gates: the chosen probs, divided by their sum when k > 1 (k = 1 keeps the raw prob)
//   aux = alpha * E * sum_e f_e * P_e, f_e = share of the N*k choices that picked e
//     (before capacity drops), P_e = mean over tokens of probs[., e]
#pragma once

#include <cstdint>

namespace mt {

// probs (N, E) = softmax of each row of logits (N, E); probs may alias logits.
void router_softmax(float* probs, const float* logits, int N, int E);

// experts (N, k) and gates (N, k) from probs (N, E) and bias (E, or null).
void router_top_k(int32_t* experts, float* gates, const float* probs, const float* bias, int N,
                  int E, int k);

// Returns the aux loss of one group (alpha included) and writes f (E), the share of
// choices per expert, which the backward needs.
double router_aux_loss(float* f, const float* probs, const int32_t* experts, int N, int E, int k,
                       float alpha);

// dlogits (N, E) = gradient w.r.t. the logits (overwritten), from dgates (N, k) through the
// renormalisation and the softmax, plus aux_scale * d aux / d probs (f is not
// differentiable: d aux / d probs[n, e] = alpha * E * f_e / N).
void router_backward(float* dlogits, const float* dgates, const float* probs,
                     const int32_t* experts, const float* gates, const float* f, float alpha,
                     float aux_scale, int N, int E, int k);

}  // namespace mt
