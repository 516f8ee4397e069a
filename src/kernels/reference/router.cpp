// Naive router: the softmax in double, top-k by repeated arg-max, and the backward through
// the explicit Jacobians of the renormalisation and the softmax.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/reference/reference.h"

namespace mt::ref {

void router_softmax(float* probs, const float* logits, int N, int E) {
  std::vector<double> e(E);
  for (int n = 0; n < N; ++n) {
    const float* l = logits + size_t(n) * E;
    double mx = l[0], sum = 0;
    for (int j = 1; j < E; ++j) mx = std::max(mx, double(l[j]));
    for (int j = 0; j < E; ++j) sum += e[j] = std::exp(double(l[j]) - mx);
    for (int j = 0; j < E; ++j) probs[size_t(n) * E + j] = float(e[j] / sum);
  }
}

void router_top_k(int32_t* experts, float* gates, const float* probs, const float* bias, int N,
                  int E, int k) {
  std::vector<bool> taken(E);
  for (int n = 0; n < N; ++n) {
    const float* p = probs + size_t(n) * E;
    taken.assign(E, false);
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      float best_score = 0;
      for (int e = 0; e < E; ++e) {
        const float score = bias ? p[e] + bias[e] : p[e];
        if (!taken[e] && (best < 0 || score > best_score)) best = e, best_score = score;
      }
      taken[best] = true;
      experts[size_t(n) * k + j] = best;
      sum += p[best];
    }
    for (int j = 0; j < k; ++j) {
      const double pj = p[experts[size_t(n) * k + j]];
      gates[size_t(n) * k + j] = float(k > 1 ? pj / sum : pj);
    }
  }
}

double router_aux_loss(float* f, const float* probs, const int32_t* experts, int N, int E, int k,
                       float alpha) {
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    size_t picked = 0;
    for (size_t a = 0; a < size_t(N) * k; ++a) picked += experts[a] == e;
    f[e] = float(double(picked) / (double(N) * k));
    double P = 0;
    for (int n = 0; n < N; ++n) P += probs[size_t(n) * E + e];
    aux += double(f[e]) * P / N;
  }
  return double(alpha) * E * aux;
}

void router_backward(float* dlogits, const float* dgates, const float* probs,
                     const int32_t* experts, const float* gates, const float* f, float alpha,
                     float aux_scale, int N, int E, int k) {
  (void)gates;  // recomputed from probs: the reference does not trust the forward's output
  std::vector<double> dp(E);
  for (int n = 0; n < N; ++n) {
    const float* p = probs + size_t(n) * E;
    const int32_t* ex = experts + size_t(n) * k;
    const float* dg = dgates + size_t(n) * k;
    for (int e = 0; e < E; ++e) dp[e] = double(aux_scale) * alpha * E * f[e] / N;
    double S = 0;
    for (int j = 0; j < k; ++j) S += p[ex[j]];
    // g_j = p[ex[j]] / S (k > 1) or p[ex[0]] (k = 1): d g_j / d p[ex[i]] = (δ_ij - g_j) / S.
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) {
        const double g = p[ex[j]] / S;
        dp[ex[i]] += k == 1 ? dg[j] : dg[j] * ((i == j) - g) / S;
      }
    // Softmax: d l_e = sum_e' dp_e' p_e' (δ_ee' - p_e).
    for (int e = 0; e < E; ++e) {
      double d = 0;
      for (int q = 0; q < E; ++q) d += dp[q] * double(p[q]) * ((q == e) - double(p[e]));
      dlogits[size_t(n) * E + e] = float(d);
    }
  }
}

}  // namespace mt::ref
