// The mixture-of-experts router (docs/contracts.md §1, MoE variant, and §9's DeepSeek-V3 router)
// as plain forward/backward functions on buffers; the layer (model/moe_router.h) owns the
// router weight and runs its matmul. N tokens, E experts, k choices per token. Naive twins:
// kernels/reference/.
//
//   scores  softmax: s = softmax(logits) over E; sigmoid (DeepSeek-V3): s = sigmoid(logits)
//   choices the k experts with the largest s[e] + bias[e], in descending order of that
//           score, ties to the lower expert index (bias: aux-loss-free balancing, may be
//           null; it only selects, the gates use the unbiased scores)
//   gates   the chosen scores, divided by their sum when RouterGates::normalise (softmax:
//           k > 1, k = 1 keeps the raw prob as Switch does; sigmoid: always), times scale
//   aux     alpha * E * sum_e f_e * P_e over a group of tokens, f_e = share of the group's
//           choices that picked e (before capacity drops), P_e = mean over the group's
//           tokens of s_e (softmax) or of s_e / sum_j s_j (sigmoid)
//
// The aux loss is made of sums over the group's tokens (router_choice_counts,
// router_share_sums), so ranks that each route part of a group (tensor parallelism's token
// split, model/moe_layer.h) add their sums before router_aux_from_sums.
#pragma once

#include <cstdint>

namespace mt {

enum class RouterScore { softmax, sigmoid };

// How the gates follow from the chosen scores.
struct RouterGates {
  bool normalise = true;  // divide the chosen scores by their sum
  float scale = 1.0f;     // --routed-scale
  // The contract's rule: softmax normalises when k > 1, sigmoid always.
  static RouterGates of(RouterScore score, int k, float scale) {
    return {score == RouterScore::sigmoid || k > 1, scale};
  }
};

// probs (N, E) = softmax of each row of logits (N, E); probs may alias logits.
void router_softmax(float* probs, const float* logits, int N, int E);
// scores (N, E) = sigmoid(logits); may alias.
void router_sigmoid(float* scores, const float* logits, int N, int E);

// experts (N, k) and gates (N, k) from scores (N, E) and bias (E, or null).
void router_top_k(int32_t* experts, float* gates, const float* scores, const float* bias, int N,
                  int E, int k, RouterGates how);
// The softmax router's gates (normalised when k > 1, scale 1).
inline void router_top_k(int32_t* experts, float* gates, const float* probs, const float* bias,
                         int N, int E, int k) {
  router_top_k(experts, gates, probs, bias, N, E, k, RouterGates::of(RouterScore::softmax, k, 1));
}

// counts (E) = choices per expert among experts (N, k) (overwritten).
void router_choice_counts(int64_t* counts, const int32_t* experts, int N, int E, int k);
// P (E) = sum over the N tokens of s_e (softmax) or s_e / sum_j s_j (sigmoid), in token
// order, in double (overwritten).
void router_share_sums(double* P, const float* scores, int N, int E, RouterScore score);
// The aux loss of a group of `tokens` tokens from its summed counts and shares (alpha
// included); writes f (E), the share of choices per expert, which the backward needs.
double router_aux_from_sums(float* f, const int64_t* counts, const double* P, int64_t tokens, int E,
                            int k, float alpha);
// One group of N softmax-routed tokens: the three above in a row.
double router_aux_loss(float* f, const float* probs, const int32_t* experts, int N, int E, int k,
                       float alpha);

// What the backward needs besides the buffers.
struct RouterBackward {
  RouterScore score = RouterScore::softmax;
  RouterGates gates;
  float alpha = 0;           // aux coefficient
  float aux_scale = 1;       // weight of this group's aux loss in the differentiated loss
  int64_t group_tokens = 0;  // the aux loss's N (this call's N when the group is local)
};

// dlogits (N, E) = gradient w.r.t. the logits (overwritten), from dgates (N, k) through the
// gates and the scores, plus aux_scale * d aux / d scores (f is not differentiable).
void router_backward(float* dlogits, const float* dgates, const float* scores,
                     const int32_t* experts, const float* gates, const float* f,
                     const RouterBackward& how, int N, int E, int k);
// The softmax router of one local group.
inline void router_backward(float* dlogits, const float* dgates, const float* probs,
                            const int32_t* experts, const float* gates, const float* f, float alpha,
                            float aux_scale, int N, int E, int k) {
  const RouterBackward how{RouterScore::softmax, RouterGates::of(RouterScore::softmax, k, 1), alpha,
                           aux_scale, N};
  router_backward(dlogits, dgates, probs, experts, gates, f, how, N, E, k);
}

}  // namespace mt
