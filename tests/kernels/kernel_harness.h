// One test template for every kernel (the idea of ggml's test-backend-ops): a KernelCase
// describes the op's inputs, how to run its forward and each backward half with either the
// fast kernel or the naive reference, and the harness checks
//   (a) fast vs reference forward, and each backward half, on random inputs,
//   (b) backward accumulates (+=): two calls give twice one call,
//   (c) the reference's analytic gradient against central finite differences of the scalar
//       L = sum(out0 * dout) for every differentiable input the half is responsible for.
// Errors are normalised by the largest magnitude of the expected tensor.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kernels/bf16.h"

namespace mt::test {

using Buf = std::vector<float>;
using Bufs = std::vector<Buf>;
enum class Impl { fast, ref };

struct BackwardHalf {
  std::string name;
  std::vector<int> wrt;     // indices of the inputs this half writes the gradient of
  bool accumulates = true;  // false for in-place kernels that overwrite (fused cross-entropy)
  // din has one buffer per input, sized like it; only din[wrt] are read back.
  std::function<void(Impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din)> run;
};

struct KernelCase {
  std::string name;
  Bufs inputs;                       // float inputs, already filled with test values
  std::vector<size_t> output_sizes;  // output 0 is the differentiated one; others are saved state
  std::function<void(Impl, const Bufs& in, Bufs& out)> forward;
  std::vector<BackwardHalf> backwards;
  double fwd_tol = 1e-5;  // fast vs reference, forward
  double bwd_tol = 1e-4;  // fast vs reference, backward
  double fd_tol = 1e-2;   // reference gradient vs finite differences
  double fd_step = 1e-2;  // central-difference step, relative to max(1, |x|)
  bool finite_differences = true;
  bool uniform_dout = false;  // dout is one scalar repeated (cross-entropy's dloss)
};

// Picks the fast kernel or its reference twin with one expression.
#define MT_DISPATCH(impl, fn, ...) \
  ((impl) == Impl::fast ? ::mt::fn(__VA_ARGS__) : ::mt::ref::fn(__VA_ARGS__))

// Largest |a - b| divided by the largest |b| (or 1e-6 if b is all zero).
double normalised_error(const Buf& a, const Buf& b);

// Runs checks (a)-(c), reporting failures through gtest.
void check_kernel_case(const KernelCase& kc);

// Deterministic test data.
Buf random_normal(size_t n, unsigned seed, float scale = 1.0f);
std::vector<int> random_ints(size_t n, unsigned seed, int lo, int hi);

// x as bf16 values (what a bf16 kernel reads), and x rounded to bf16 but kept in fp32 (the
// exact values those kernels multiply, for references and error bounds).
std::vector<bf16> to_bf16_vec(const Buf& x);
Buf rounded(const Buf& x);

}  // namespace mt::test
