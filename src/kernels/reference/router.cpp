// Naive router: the softmax and the sigmoid in double, top-k by repeated arg-max, and the
// backward through the explicit Jacobians of the gates and the scores.
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

void router_sigmoid(float* scores, const float* logits, int N, int E) {
  for (size_t i = 0; i < size_t(N) * E; ++i)
    scores[i] = float(1.0 / (1.0 + std::exp(-double(logits[i]))));
}

void router_top_k(int32_t* experts, float* gates, const float* probs, const float* bias, int N,
                  int E, int k, RouterGates how) {
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
      gates[size_t(n) * k + j] = float((how.normalise ? pj / sum : pj) * how.scale);
    }
  }
}

void router_choice_counts(int64_t* counts, const int32_t* experts, int N, int E, int k) {
  for (int e = 0; e < E; ++e) {
    counts[e] = 0;
    for (size_t a = 0; a < size_t(N) * k; ++a) counts[e] += experts[a] == e;
  }
}

void router_share_sums(double* P, const float* scores, int N, int E, RouterScore score) {
  for (int e = 0; e < E; ++e) {
    P[e] = 0;
    for (int n = 0; n < N; ++n) {
      const float* s = scores + size_t(n) * E;
      double total = 1;
      if (score == RouterScore::sigmoid) {
        total = 0;
        for (int j = 0; j < E; ++j) total += s[j];
      }
      P[e] += s[e] / total;
    }
  }
}

double router_aux_from_sums(float* f, const int64_t* counts, const double* P, int64_t tokens, int E,
                            int k, float alpha) {
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    f[e] = float(double(counts[e]) / (double(tokens) * k));
    aux += double(f[e]) * P[e] / double(tokens);
  }
  return double(alpha) * E * aux;
}

double router_aux_loss(float* f, const float* probs, const int32_t* experts, int N, int E, int k,
                       float alpha) {
  std::vector<int64_t> counts(E);
  std::vector<double> P(E);
  ref::router_choice_counts(counts.data(), experts, N, E, k);
  ref::router_share_sums(P.data(), probs, N, E, RouterScore::softmax);
  return router_aux_from_sums(f, counts.data(), P.data(), N, E, k, alpha);
}

namespace {

// d score (E) of one token: the aux term, then the gates (recomputed from the scores: the
// reference does not trust the forward's output).
std::vector<double> score_gradient(const float* s, const int32_t* ex, const float* dg,
                                   const float* f, const RouterBackward& how, int E, int k) {
  const double coef = double(how.aux_scale) * how.alpha * E / double(how.group_tokens);
  std::vector<double> ds(E, 0.0);
  double T = 0;
  for (int e = 0; e < E; ++e) T += s[e];
  for (int i = 0; i < E; ++i) {
    if (how.score == RouterScore::softmax) {
      ds[i] = coef * f[i];
      continue;
    }
    // P_e's share s_e / T: d (s_e / T) / d s_i = (δ_ei - s_e / T) / T.
    for (int e = 0; e < E; ++e) ds[i] += coef * f[e] * ((e == i) - s[e] / T) / T;
  }
  double S = 0;
  for (int j = 0; j < k; ++j) S += s[ex[j]];
  // g_j = c s_j / S (normalised) or c s_j: d g_j / d s_i = c (δ_ij - s_j / S) / S or c δ_ij.
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      const double d = how.gates.normalise ? ((i == j) - s[ex[j]] / S) / S : double(i == j);
      ds[ex[i]] += dg[j] * how.gates.scale * d;
    }
  return ds;
}

}  // namespace

void router_backward(float* dlogits, const float* dgates, const float* scores,
                     const int32_t* experts, const float* gates, const float* f,
                     const RouterBackward& how, int N, int E, int k) {
  (void)gates;
  for (int n = 0; n < N; ++n) {
    const float* s = scores + size_t(n) * E;
    const std::vector<double> ds =
        score_gradient(s, experts + size_t(n) * k, dgates + size_t(n) * k, f, how, E, k);
    for (int e = 0; e < E; ++e) {
      double d = 0;
      if (how.score == RouterScore::softmax) {
        // d l_e = sum_q ds_q p_q (δ_qe - p_e).
        for (int q = 0; q < E; ++q) d += ds[q] * double(s[q]) * ((q == e) - double(s[e]));
      } else {
        d = ds[e] * double(s[e]) * (1.0 - double(s[e]));
      }
      dlogits[size_t(n) * E + e] = float(d);
    }
  }
}

}  // namespace mt::ref
