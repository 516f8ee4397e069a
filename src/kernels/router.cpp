#include "kernels/router.h"

#include <cmath>
#include <cstddef>

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

void router_top_k(int32_t* experts, float* gates, const float* probs, const float* bias, int N,
                  int E, int k) {
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
    const float inv = k > 1 ? 1.0f / sum : 1.0f;
    for (int j = 0; j < k; ++j) g[j] = p[ex[j]] * inv;
  }
}

double router_aux_loss(float* f, const float* probs, const int32_t* experts, int N, int E, int k,
                       float alpha) {
  double aux = 0;
  for (int e = 0; e < E; ++e) f[e] = 0;
  for (size_t i = 0; i < size_t(N) * k; ++i) f[experts[i]] += 1;
  for (int e = 0; e < E; ++e) {
    f[e] /= float(size_t(N) * k);
    double P = 0;
    for (int n = 0; n < N; ++n) P += probs[size_t(n) * E + e];
    aux += double(f[e]) * (P / N);
  }
  return double(alpha) * E * aux;
}

void router_backward(float* dlogits, const float* dgates, const float* probs,
                     const int32_t* experts, const float* gates, const float* f, float alpha,
                     float aux_scale, int N, int E, int k) {
  const float aux_coef = aux_scale * alpha * float(E) / float(N);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* p = probs + size_t(n) * E;
    const int32_t* ex = experts + size_t(n) * k;
    const float* g = gates + size_t(n) * k;
    const float* dg = dgates + size_t(n) * k;
    float* d = dlogits + size_t(n) * E;  // first d probs, then d logits
    for (int e = 0; e < E; ++e) d[e] = aux_coef * f[e];
    if (k == 1) {
      d[ex[0]] += dg[0];
    } else {
      // g_j = p_j / S  =>  d p_i = (dg_i - sum_j dg_j g_j) / S, with S = p_i / g_i.
      float dot = 0;
      for (int j = 0; j < k; ++j) dot += dg[j] * g[j];
      float S = 0;
      for (int j = 0; j < k; ++j) S += p[ex[j]];
      for (int j = 0; j < k; ++j) d[ex[j]] += (dg[j] - dot) / S;
    }
    float pd = 0;
    for (int e = 0; e < E; ++e) pd += p[e] * d[e];
    for (int e = 0; e < E; ++e) d[e] = p[e] * (d[e] - pd);
  }
}

}  // namespace mt
