#include "kernels/kernel_harness.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace mt::test {

double normalised_error(const Buf& a, const Buf& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); i++) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  if (a.size() != b.size()) return INFINITY;
  return diff / std::max(scale, 1e-6);
}

std::vector<bf16> to_bf16_vec(const Buf& x) {
  std::vector<bf16> h(x.size());
  to_bf16(h.data(), x.data(), x.size());
  return h;
}

Buf rounded(const Buf& x) {
  Buf r = x;
  round_to_bf16(r.data(), r.size());
  return r;
}

Buf random_normal(size_t n, unsigned seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Buf out(n);
  for (float& x : out) x = dist(gen);
  return out;
}

std::vector<int> random_ints(size_t n, unsigned seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> out(n);
  for (int& x : out) x = dist(gen);
  return out;
}

namespace {

Bufs run_forward(const KernelCase& kc, Impl impl, const Bufs& in) {
  Bufs out;
  for (size_t n : kc.output_sizes) out.emplace_back(n, 0.0f);
  kc.forward(impl, in, out);
  return out;
}

Bufs zero_like(const Bufs& in) {
  Bufs z;
  for (const Buf& b : in) z.emplace_back(b.size(), 0.0f);
  return z;
}

double loss_of(const Buf& out0, const Buf& dout) {
  double l = 0.0;
  for (size_t i = 0; i < out0.size(); i++) l += static_cast<double>(out0[i]) * dout[i];
  return l;
}

// Up to `count` distinct indices of an n-element tensor, always including the first and last.
std::vector<size_t> sample_indices(size_t n, size_t count, unsigned seed) {
  std::vector<size_t> idx(n);
  for (size_t i = 0; i < n; i++) idx[i] = i;
  if (n <= count) return idx;
  std::shuffle(idx.begin() + 1, idx.end() - 1, std::mt19937(seed));
  idx.resize(count - 1);
  idx.push_back(n - 1);
  return idx;
}

void check_forward(const KernelCase& kc) {
  Bufs ref = run_forward(kc, Impl::ref, kc.inputs);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Bufs fast = run_forward(kc, Impl::fast, kc.inputs);
    for (size_t o = 0; o < ref.size(); o++)
      EXPECT_LE(normalised_error(fast[o], ref[o]), kc.fwd_tol)
          << "forward output " << o << " (" << threads << " threads)";
  }
}

void check_backward(const KernelCase& kc, const BackwardHalf& half, const Buf& dout) {
  Bufs out = run_forward(kc, Impl::ref, kc.inputs);
  Bufs ref = zero_like(kc.inputs);
  half.run(Impl::ref, kc.inputs, out, dout, ref);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    Bufs once = zero_like(kc.inputs);
    half.run(Impl::fast, kc.inputs, out, dout, once);
    for (int w : half.wrt)
      EXPECT_LE(normalised_error(once[w], ref[w]), kc.bwd_tol)
          << half.name << ": d input " << w << " (" << threads << " threads)";
    if (!half.accumulates) continue;
    Bufs twice = zero_like(kc.inputs);
    half.run(Impl::fast, kc.inputs, out, dout, twice);
    half.run(Impl::fast, kc.inputs, out, dout, twice);
    for (int w : half.wrt) {
      Buf doubled = once[w];
      for (float& x : doubled) x *= 2.0f;
      EXPECT_LE(normalised_error(twice[w], doubled), 1e-6)
          << half.name << ": d input " << w << " does not accumulate";
    }
  }
}

void check_finite_differences(const KernelCase& kc, const BackwardHalf& half, const Buf& dout) {
  Bufs out = run_forward(kc, Impl::ref, kc.inputs);
  Bufs grad = zero_like(kc.inputs);
  half.run(Impl::ref, kc.inputs, out, dout, grad);
  for (int w : half.wrt) {
    const Buf& g = grad[w];
    double scale = 1e-3;  // an all-zero gradient is checked against an absolute floor
    for (float x : g) scale = std::max(scale, std::abs(static_cast<double>(x)));
    Bufs in = kc.inputs;
    for (size_t i : sample_indices(in[w].size(), 24, 1234 + w)) {
      float x0 = in[w][i];
      float h = static_cast<float>(kc.fd_step * std::max(1.0f, std::abs(x0)));
      in[w][i] = x0 + h;
      double lp = loss_of(run_forward(kc, Impl::ref, in)[0], dout);
      in[w][i] = x0 - h;
      double lm = loss_of(run_forward(kc, Impl::ref, in)[0], dout);
      in[w][i] = x0;
      // The actual step is (x0 + h) - (x0 - h) after rounding to float.
      double step = static_cast<double>(x0 + h) - static_cast<double>(x0 - h);
      double fd = (lp - lm) / step;
      EXPECT_LE(std::abs(fd - g[i]) / scale, kc.fd_tol)
          << half.name << ": d input " << w << "[" << i << "] analytic " << g[i] << " vs numeric "
          << fd;
    }
  }
}

}  // namespace

void check_kernel_case(const KernelCase& kc) {
  int saved = omp_get_max_threads();
  check_forward(kc);
  size_t nout = kc.output_sizes.empty() ? 0 : kc.output_sizes[0];
  Buf dout = random_normal(nout, 99);
  if (kc.uniform_dout) std::fill(dout.begin(), dout.end(), 0.7f);
  for (const BackwardHalf& half : kc.backwards) {
    check_backward(kc, half, dout);
    if (kc.finite_differences) check_finite_differences(kc, half, dout);
  }
  omp_set_num_threads(saved);
}

}  // namespace mt::test
