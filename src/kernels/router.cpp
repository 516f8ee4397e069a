#include "kernels/router.h"

#include <cmath>
#include <cstddef>
#include <vector>

namespace mt {

void router_softmax(float* probs, const float* logits, int N, int E) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* l = logits + size_t(n) * E;
    float* p = probs + size_t(n) * E;
    float mx = l[0];
    for (int e = 1; e < E; ++e) mx = l[e] > mx ? l[e] : mx;
    float sum = 0;
    for (int e = 0; e < E; ++e) {
      p[e] = std::exp(l[e] - mx);
      sum += p[e];
    }
    const float inv = 1.0f / sum;
    for (int e = 0; e < E; ++e) p[e] *= inv;
  }
}

void router_sigmoid(float* scores, const float* logits, int N, int E) {
  const size_t n = size_t(N) * E;
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) scores[i] = 1.0f / (1.0f + std::exp(-logits[i]));
}

void router_top_k(int32_t* experts, float* gates, const float* probs, const float* bias, int N,
                  int E, int k, RouterGates how) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* p = probs + size_t(n) * E;
    int32_t* ex = experts + size_t(n) * k;
    float* g = gates + size_t(n) * k;
    // Insertion into a list kept sorted by descending score. Experts arrive in ascending
    // order and only a strictly larger score moves ahead, so ties keep the lower index.
    // The scores of the list live in g until the gates are written.
    int have = 0;
    for (int e = 0; e < E; ++e) {
      const float s = bias ? p[e] + bias[e] : p[e];
      if (have == k && !(s > g[k - 1])) continue;
      int pos = have < k ? have++ : k - 1;
      while (pos > 0 && s > g[pos - 1]) {
        g[pos] = g[pos - 1];
        ex[pos] = ex[pos - 1];
        --pos;
      }
      g[pos] = s;
      ex[pos] = e;
    }
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += p[ex[j]];
    const float inv = how.normalise ? 1.0f / sum : 1.0f;
    for (int j = 0; j < k; ++j) g[j] = p[ex[j]] * inv;
    if (how.scale != 1.0f)
      for (int j = 0; j < k; ++j) g[j] *= how.scale;
  }
}

void router_choice_counts(int64_t* counts, const int32_t* experts, int N, int E, int k) {
  for (int e = 0; e < E; ++e) counts[e] = 0;
  for (size_t a = 0; a < size_t(N) * k; ++a) ++counts[experts[a]];
}

void router_share_sums(double* P, const float* scores, int N, int E, RouterScore score) {
  for (int e = 0; e < E; ++e) P[e] = 0;
  if (score == RouterScore::softmax) {
    // Expert-major, as the softmax router always summed (its sums stay bit for bit).
    for (int e = 0; e < E; ++e)
      for (int n = 0; n < N; ++n) P[e] += scores[size_t(n) * E + e];
    return;
  }
  for (int n = 0; n < N; ++n) {
    const float* s = scores + size_t(n) * E;
    double total = 0;
    for (int e = 0; e < E; ++e) total += s[e];
    for (int e = 0; e < E; ++e) P[e] += s[e] / total;
  }
}

double router_aux_from_sums(float* f, const int64_t* counts, const double* P, int64_t tokens, int E,
                            int k, float alpha) {
  double aux = 0;
  for (int e = 0; e < E; ++e) {
    f[e] = float(counts[e]) / float(tokens * k);
    aux += double(f[e]) * (P[e] / double(tokens));
  }
  return double(alpha) * E * aux;
}

double router_aux_loss(float* f, const float* probs, const int32_t* experts, int N, int E, int k,
                       float alpha) {
  std::vector<int64_t> counts(static_cast<size_t>(E));
  std::vector<double> P(static_cast<size_t>(E));
  router_choice_counts(counts.data(), experts, N, E, k);
  router_share_sums(P.data(), probs, N, E, RouterScore::softmax);
  return router_aux_from_sums(f, counts.data(), P.data(), N, E, k, alpha);
}

namespace {

// d (E) += the gates' gradient w.r.t. the chosen scores of one token.
void gates_backward(float* d, const float* s, const int32_t* ex, const float* g, const float* dg,
                    int k, RouterGates how) {
  if (!how.normalise) {
    for (int j = 0; j < k; ++j) d[ex[j]] += how.scale * dg[j];
    return;
  }
  // g_j = c s_j / S  =>  d s_i = (c dg_i - sum_j dg_j g_j) / S.
  float dot = 0;
  for (int j = 0; j < k; ++j) dot += dg[j] * g[j];
  float S = 0;
  for (int j = 0; j < k; ++j) S += s[ex[j]];
  for (int j = 0; j < k; ++j) d[ex[j]] += (how.scale * dg[j] - dot) / S;
}

// One token's score gradient d (E) to the logits (in place).
void softmax_backward_row(float* d, const float* p, int E) {
  float pd = 0;
  for (int e = 0; e < E; ++e) pd += p[e] * d[e];
  for (int e = 0; e < E; ++e) d[e] = p[e] * (d[e] - pd);
}

// Sigmoid: the aux term through the shares s_e / T (T = sum_j s_j), then through the sigmoid.
void sigmoid_backward_row(float* d, const float* s, const float* f, float aux_coef, int E) {
  double T = 0, fs = 0;
  for (int e = 0; e < E; ++e) T += s[e], fs += double(f[e]) * s[e];
  const double a = aux_coef / T, b = fs / T;
  for (int e = 0; e < E; ++e) d[e] = (d[e] + float(a * (f[e] - b))) * s[e] * (1.0f - s[e]);
}

}  // namespace

void router_backward(float* dlogits, const float* dgates, const float* scores,
                     const int32_t* experts, const float* gates, const float* f,
                     const RouterBackward& how, int N, int E, int k) {
  const float aux_coef = how.aux_scale * how.alpha * float(E) / float(how.group_tokens);
  const bool softmax = how.score == RouterScore::softmax;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* s = scores + size_t(n) * E;
    float* d = dlogits + size_t(n) * E;  // first d scores, then d logits
    // softmax: d aux / d p_e = aux_coef f_e; sigmoid: added in its row backward.
    for (int e = 0; e < E; ++e) d[e] = softmax ? aux_coef * f[e] : 0.0f;
    gates_backward(d, s, experts + size_t(n) * k, gates + size_t(n) * k, dgates + size_t(n) * k, k,
                   how.gates);
    if (softmax)
      softmax_backward_row(d, s, E);
    else
      sigmoid_backward_row(d, s, f, aux_coef, E);
  }
}

}  // namespace mt
