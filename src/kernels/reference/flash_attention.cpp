// The naive twin of flash attention (flash_attention_ref.h).
#include <cmath>
#include <vector>

#include "kernels/reference/flash_attention_ref.h"

namespace mt::ref {
namespace {

using Vec = std::vector<double>;

// Head vector x (hd floats) at position pos, rotated as rope_rotate does, in double.
Vec rotated(const float* x, int pos, const RopeTable* rope, int hd) {
  Vec y(x, x + hd);
  if (!rope) return y;
  const int half = hd / 2;
  for (int i = 0; i < half; i++) {
    const double c = rope->cos(pos)[i], s = rope->sin(pos)[i];
    y[i] = x[i] * c - x[i + half] * s;
    y[i + half] = x[i + half] * c + x[i] * s;
  }
  return y;
}

// The adjoint of `rotated` applied to a gradient.
void unrotate(Vec& g, int pos, const RopeTable* rope, int hd) {
  if (!rope) return;
  const int half = hd / 2;
  for (int i = 0; i < half; i++) {
    const double c = rope->cos(pos)[i], s = rope->sin(pos)[i], x = g[i], y = g[i + half];
    g[i] = x * c + y * s;
    g[i + half] = y * c - x * s;
  }
}

double dot(const Vec& x, const Vec& y) {
  double s = 0;
  for (size_t d = 0; d < x.size(); d++) s += x[d] * y[d];
  return s;
}

// The rotated q of (b, h, row i), and k of (b, kv head, row j); v unrotated.
struct Heads {
  const FlashAttention& a;
  Vec q(int b, int h, int i) const {
    return rotated(a.q + (size_t(b) * a.Tq + i) * a.ldq + size_t(h) * a.hd, a.qpos[i], a.rope,
                   a.hd);
  }
  Vec k(int b, int g, int j) const {
    return rotated(a.k + (size_t(b) * a.Tk + j) * a.ldk + size_t(g) * a.hd, a.kpos[j], a.rope,
                   a.hd);
  }
  const float* v(int b, int g, int j) const {
    return a.v + (size_t(b) * a.Tk + j) * a.ldv + size_t(g) * a.hd;
  }
};

// --dropout: the kept-and-scaled factor of (b, query head h, row i, key j), from the
// formula (kernels/dropout.h's dropout_keeps, one element at a time).
double drop_factor(const FlashAttention& a, int b, int h, int i, int j) {
  const FlashDropout& d = a.dropout;
  if (!d.on()) return 1.0;
  const int64_t token = d.row_tokens[size_t(b) * a.Tq + i];
  const int64_t feature = (d.head_offset + int64_t(h)) * d.seq_len + a.kpos[j];
  return dropout_keeps(d.key, d.p, token, feature) ? 1.0 / (1.0 - double(d.p)) : 0.0;
}

}  // namespace

void flash_attention_forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
                             bool accumulate, std::span<float>) {
  const Heads x{a};
  const double scale = 1.0 / std::sqrt(double(a.hd));
  for (int b = 0; b < a.B; b++)
    for (int h = 0; h < a.H; h++)
      for (int i = 0; i < a.Tq; i++) {
        const int g = h / (a.H / a.Hkv);
        const Vec q = x.q(b, h, i);
        Vec s(a.Tk, -INFINITY), o(a.hd, 0.0);
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < a.Tk; j++)
          if (a.kpos[j] <= a.qpos[i]) m = std::max(m, s[j] = scale * dot(q, x.k(b, g, j)));
        for (int j = 0; j < a.Tk; j++) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - m), pv = p * drop_factor(a, b, h, i, j);
          sum += p;
          for (int d = 0; d < a.hd; d++) o[d] += pv * x.v(b, g, j)[d];
        }
        const double lse_new = sum > 0 ? m + std::log(sum) : -INFINITY;
        float* orow = out + (size_t(b) * a.Tq + i) * ldo + size_t(h) * a.hd;
        float& l = lse[(size_t(b) * a.H + h) * a.Tq + i];
        // The log-sum-exp merge with what out and lse hold (nothing unless accumulating).
        const double old = accumulate ? double(l) : -INFINITY, mx = std::max(old, lse_new);
        if (mx == -INFINITY) {  // no key seen at all: out 0, lse -inf
          if (!accumulate)
            for (int d = 0; d < a.hd; d++) orow[d] = 0.0f;
          l = -INFINITY;
          continue;
        }
        const double w_old = std::exp(old - mx), w_new = std::exp(lse_new - mx);
        for (int d = 0; d < a.hd; d++)
          orow[d] =
              float(((w_old > 0 ? w_old * orow[d] : 0.0) + (w_new > 0 ? w_new * o[d] / sum : 0.0)) /
                    (w_old + w_new));
        l = float(mx + std::log(w_old + w_new));
      }
}

void flash_attention_backward_prep(float* D, const float* out, size_t ldo, const float* dout,
                                   size_t lddo, int B, int Tq, int H, int hd) {
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int t = 0; t < Tq; t++) {
        double s = 0;
        for (int d = 0; d < hd; d++)
          s += double(out[(size_t(b) * Tq + t) * ldo + size_t(h) * hd + d]) *
               dout[(size_t(b) * Tq + t) * lddo + size_t(h) * hd + d];
        D[(size_t(b) * H + h) * Tq + t] = float(s);
      }
}

void flash_attention_backward(const FlashGrads& gr, const float* dout, size_t lddo,
                              const float* lse, const float* D, const FlashAttention& a,
                              std::span<float>) {
  const Heads x{a};
  const double scale = 1.0 / std::sqrt(double(a.hd));
  const int hd = a.hd;
  // Gradients w.r.t. the rotated q and k, and v, per row and head, in double.
  std::vector<Vec> dq(size_t(a.B) * a.Tq * a.H, Vec(hd, 0.0)),
      dk(size_t(a.B) * a.Tk * a.Hkv, Vec(hd, 0.0)), dv(dk);
  for (int b = 0; b < a.B; b++)
    for (int h = 0; h < a.H; h++)
      for (int i = 0; i < a.Tq; i++) {
        const int g = h / (a.H / a.Hkv);
        const double L = lse[(size_t(b) * a.H + h) * a.Tq + i];
        const double Di = D[(size_t(b) * a.H + h) * a.Tq + i];
        if (L == -INFINITY) continue;
        const Vec q = x.q(b, h, i);
        const float* dy = dout + (size_t(b) * a.Tq + i) * lddo + size_t(h) * hd;
        Vec& dqi = dq[(size_t(b) * a.Tq + i) * a.H + h];
        for (int j = 0; j < a.Tk; j++) {
          if (a.kpos[j] > a.qpos[i]) continue;
          const Vec k = x.k(b, g, j);
          const float* v = x.v(b, g, j);
          const double p = std::exp(scale * dot(q, k) - L);
          double dp = 0;
          for (int d = 0; d < hd; d++) dp += double(dy[d]) * v[d];
          const double f = drop_factor(a, b, h, i, j);
          const double ds = p * (dp * f - Di) * scale;
          Vec &dkj = dk[(size_t(b) * a.Tk + j) * a.Hkv + g],
              &dvj = dv[(size_t(b) * a.Tk + j) * a.Hkv + g];
          for (int d = 0; d < hd; d++) {
            dqi[d] += ds * k[d];
            dkj[d] += ds * q[d];
            dvj[d] += p * f * dy[d];
          }
        }
      }
  // Back through the rotations, then added to the caller's gradients.
  for (int b = 0; b < a.B; b++) {
    for (int i = 0; i < a.Tq; i++)
      for (int h = 0; h < a.H; h++) {
        Vec& v = dq[(size_t(b) * a.Tq + i) * a.H + h];
        unrotate(v, a.qpos[i], a.rope, hd);
        float* dst = gr.dq + (size_t(b) * a.Tq + i) * gr.lddq + size_t(h) * hd;
        for (int d = 0; d < hd; d++) dst[d] += float(v[d]);
      }
    for (int j = 0; j < a.Tk; j++)
      for (int g = 0; g < a.Hkv; g++) {
        Vec& k = dk[(size_t(b) * a.Tk + j) * a.Hkv + g];
        unrotate(k, a.kpos[j], a.rope, hd);
        float* dkr = gr.dk + (size_t(b) * a.Tk + j) * gr.lddk + size_t(g) * hd;
        float* dvr = gr.dv + (size_t(b) * a.Tk + j) * gr.lddv + size_t(g) * hd;
        for (int d = 0; d < hd; d++) {
          dkr[d] += float(k[d]);
          dvr[d] += float(dv[(size_t(b) * a.Tk + j) * a.Hkv + g][d]);
        }
      }
  }
}

}  // namespace mt::ref
