// Every kernel through the one harness (kernel_harness.h), over shapes chosen to hit the
// edges: single rows, sizes that are not multiples of the vector width, one head, T = 1,
// row blocks of the causal attention split mid-way, padded vocabulary rows, one expert,
// k = E, capacity drops, empty expert blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/embedding.h"
#include "kernels/gelu.h"
#include "kernels/kernel_harness.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/reference/reference.h"
#include "kernels/router.h"
#include "kernels/token_permutation.h"

namespace mt::test {
namespace {

KernelCase matmul_case(int N, int C, int OC, bool with_bias) {
  KernelCase kc;
  kc.name = str("matmul_N", N, "_C", C, "_OC", OC, with_bias ? "_bias" : "");
  kc.inputs = {random_normal(size_t(N) * C, 1), random_normal(size_t(OC) * C, 2, 0.3f),
               random_normal(with_bias ? OC : 0, 3)};
  kc.output_sizes = {size_t(N) * OC};
  auto bias = [with_bias](const Bufs& b) { return with_bias ? b[2].data() : nullptr; };
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, matmul_forward, out[0].data(), in[0].data(), in[1].data(), bias(in), N, C,
                OC);
  };
  kc.backwards.push_back({"backward_input",
                          {0},
                          true,
                          [=](Impl impl, const Bufs& in, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, matmul_backward_input, din[0].data(), dout.data(),
                                        in[1].data(), N, C, OC);
                          }});
  std::vector<int> wrt = {1};
  if (with_bias) wrt.push_back(2);
  kc.backwards.push_back({"backward_weight", wrt, true,
                          [=](Impl impl, const Bufs& in, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, matmul_backward_weight, din[1].data(),
                                        with_bias ? din[2].data() : nullptr, dout.data(),
                                        in[0].data(), N, C, OC);
                          }});
  kc.finite_differences = size_t(N) * C * OC < 200000;
  return kc;
}

// sgemm has no backward of its own; the forward check covers all transposes, leading
// dimensions larger than the matrix, and alpha/beta.
KernelCase sgemm_case(bool ta, bool tb, int M, int N, int K, int pad) {
  KernelCase kc;
  kc.name = str("sgemm_", ta ? "T" : "N", tb ? "T" : "N", "_M", M, "_N", N, "_K", K, "_pad", pad);
  int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  kc.inputs = {random_normal(size_t(ta ? K : M) * lda, 4),
               random_normal(size_t(tb ? N : K) * ldb, 5), random_normal(size_t(M) * ldc, 6)};
  kc.output_sizes = {size_t(M) * ldc};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    out[0] = in[2];
    MT_DISPATCH(impl, sgemm, ta, tb, M, N, K, 0.5f, in[0].data(), lda, in[1].data(), ldb, 0.25f,
                out[0].data(), ldc);
  };
  return kc;
}

KernelCase layernorm_case(int N, int C) {
  KernelCase kc;
  kc.name = str("layernorm_N", N, "_C", C);
  Buf x = random_normal(size_t(N) * C, 7, 2.0f);
  for (float& v : x) v += 3.0f;  // a non-zero mean exercises the centring
  kc.inputs = {x, random_normal(C, 8), random_normal(C, 9)};
  kc.output_sizes = {size_t(N) * C, size_t(N), size_t(N)};  // out, mean, rstd
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, layernorm_forward, out[0].data(), out[1].data(), out[2].data(), in[0].data(),
                in[1].data(), in[2].data(), N, C);
  };
  kc.backwards.push_back(
      {"backward_input",
       {0},
       true,
       [=](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         MT_DISPATCH(impl, layernorm_backward_input, din[0].data(), dout.data(), in[0].data(),
                     in[1].data(), out[1].data(), out[2].data(), N, C);
       }});
  kc.backwards.push_back(
      {"backward_weight",
       {1, 2},
       true,
       [=](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         MT_DISPATCH(impl, layernorm_backward_weight, din[1].data(), din[2].data(), dout.data(),
                     in[0].data(), out[1].data(), out[2].data(), N, C);
       }});
  kc.fd_step = 1e-2;
  return kc;
}

KernelCase gelu_case(size_t n) {
  KernelCase kc;
  kc.name = str("gelu_n", n);
  kc.inputs = {random_normal(n, 10, 3.0f)};
  kc.output_sizes = {n};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, gelu_forward, out[0].data(), in[0].data(), n);
  };
  kc.backwards.push_back({"backward",
                          {0},
                          true,
                          [=](Impl impl, const Bufs& in, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, gelu_backward, din[0].data(), in[0].data(),
                                        dout.data(), n);
                          }});
  return kc;
}

KernelCase bias_gelu_case(int N, int OC) {
  KernelCase kc;
  kc.name = str("bias_gelu_N", N, "_OC", OC);
  kc.inputs = {random_normal(size_t(N) * OC, 11, 2.0f), random_normal(OC, 12)};
  kc.output_sizes = {size_t(N) * OC, size_t(N) * OC};  // out, pre (with the bias added)
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    out[1] = in[0];
    MT_DISPATCH(impl, bias_gelu_forward, out[0].data(), out[1].data(), in[1].data(), N, OC);
  };
  return kc;
}

KernelCase attention_case(int B, int T, int C, int NH) {
  KernelCase kc;
  kc.name = str("attention_B", B, "_T", T, "_C", C, "_NH", NH);
  kc.inputs = {random_normal(size_t(B) * T * 3 * C, 13)};
  kc.output_sizes = {size_t(B) * T * C, size_t(B) * NH * T * T};  // out, att
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, attention_forward, out[0].data(), out[1].data(), in[0].data(), B, T, C, NH);
  };
  auto scratch = std::make_shared<Buf>(attention_backward_scratch_floats(B, T, C, NH));
  kc.backwards.push_back(
      {"backward",
       {0},
       true,
       [=](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         MT_DISPATCH(impl, attention_backward, din[0].data(), scratch->data(), dout.data(),
                     in[0].data(), out[1].data(), B, T, C, NH);
       }});
  kc.finite_differences = size_t(B) * T * T * C < 300000;
  return kc;
}

KernelCase crossentropy_case(int N, int V, int ldv) {
  KernelCase kc;
  kc.name = str("crossentropy_N", N, "_V", V, "_ldv", ldv);
  kc.inputs = {random_normal(size_t(N) * ldv, 14, 2.0f)};
  auto targets = std::make_shared<std::vector<int>>(random_ints(N, 15, 0, V - 1));
  kc.output_sizes = {size_t(N)};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, crossentropy_forward, out[0].data(), in[0].data(), targets->data(), N, V,
                ldv);
  };
  // The fused kernel overwrites the logits with their gradient: it is the backward here, with
  // dloss the (uniform) dout, and its losses must equal the forward's.
  kc.backwards.push_back(
      {"forward_backward",
       {0},
       false,
       [=](Impl impl, const Bufs& in, const Bufs& out, const Buf& dout, Bufs& din) {
         Buf losses(N);
         din[0] = in[0];
         MT_DISPATCH(impl, crossentropy_forward_backward, losses.data(), din[0].data(),
                     targets->data(), dout[0], N, V, ldv);
         EXPECT_LE(normalised_error(losses, out[0]), 1e-5) << "fused losses differ";
       }});
  kc.uniform_dout = true;
  return kc;
}

KernelCase embedding_case(int B, int T, int C, int V, int vocab_start, int vocab_rows,
                          bool with_wpe) {
  KernelCase kc;
  kc.name = str("embedding_B", B, "_T", T, "_C", C, "_V", V, "_rows", vocab_start, "to",
                vocab_start + vocab_rows, with_wpe ? "_wpe" : "");
  auto idx = std::make_shared<std::vector<int>>(random_ints(size_t(B) * T, 16, 0, V - 1));
  kc.inputs = {random_normal(size_t(vocab_rows) * C, 17), random_normal(with_wpe ? T * C : 0, 18)};
  kc.output_sizes = {size_t(B) * T * C};
  auto wpe = [with_wpe](const Bufs& b) { return with_wpe ? b[1].data() : nullptr; };
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, embedding_forward, out[0].data(), idx->data(), in[0].data(), wpe(in), B, T, C,
                vocab_start, vocab_rows);
  };
  std::vector<int> wrt = {0};
  if (with_wpe) wrt.push_back(1);
  kc.backwards.push_back(
      {"backward", wrt, true, [=](Impl impl, const Bufs&, const Bufs&, const Buf& dout, Bufs& din) {
         MT_DISPATCH(impl, embedding_backward, din[0].data(), with_wpe ? din[1].data() : nullptr,
                     dout.data(), idx->data(), B, T, C, vocab_start, vocab_rows);
       }});
  return kc;
}

// Router logits whose entries within a row are at least 0.3 apart, so the finite-difference
// steps (about 0.01) never change which experts a token picks.
Buf separated_logits(int N, int E, unsigned seed) {
  Buf l = random_normal(size_t(N) * E, seed, 0.05f);
  std::vector<int> perm(E);
  for (int n = 0; n < N; ++n) {
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed + n));
    for (int e = 0; e < E; ++e) l[size_t(n) * E + e] += 0.4f * (perm[e] - E / 2);
  }
  return l;
}

// The router from logits to gates and aux loss. Output 0 is the gates (N, k) followed by
// the aux loss, so L = sum(gates * dgates) + aux * aux_scale and the backward, given
// dout = (dgates, aux_scale), is dL/dlogits: the gate path through the renormalisation and
// the softmax plus the aux term (whose f is piecewise constant, so finite differences see
// the same derivative).
KernelCase router_case(int N, int E, int k, bool with_bias) {
  KernelCase kc;
  kc.name = str("router_N", N, "_E", E, "_k", k, with_bias ? "_bias" : "");
  kc.inputs = {separated_logits(N, E, 30), random_normal(with_bias ? E : 0, 31, 0.02f)};
  const size_t A = size_t(N) * k;
  // (N*k + 1) gates and aux, (N, E) probs, (N, k) experts as floats, (E) f
  kc.output_sizes = {A + 1, size_t(N) * E, A, size_t(E)};
  const float alpha = 0.3f;
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    std::vector<int32_t> experts(A);
    const float* bias = with_bias ? in[1].data() : nullptr;
    MT_DISPATCH(impl, router_softmax, out[1].data(), in[0].data(), N, E);
    MT_DISPATCH(impl, router_top_k, experts.data(), out[0].data(), out[1].data(), bias, N, E, k);
    out[0][A] = float(MT_DISPATCH(impl, router_aux_loss, out[3].data(), out[1].data(),
                                  experts.data(), N, E, k, alpha));
    for (size_t a = 0; a < A; ++a) out[2][a] = float(experts[a]);
  };
  kc.backwards.push_back({"backward",
                          {0},
                          false,
                          [=](Impl impl, const Bufs&, const Bufs& out, const Buf& dout, Bufs& din) {
                            std::vector<int32_t> experts(out[2].begin(), out[2].end());
                            MT_DISPATCH(impl, router_backward, din[0].data(), dout.data(),
                                        out[1].data(), experts.data(), out[0].data(), out[3].data(),
                                        alpha, dout[A], N, E, k);
                          }});
  kc.fd_step = 1e-3;
  return kc;
}

// A dispatch plan for the permutation cases: experts (N, k) distinct per token.
struct Plan {
  int M = 0;
  std::vector<int32_t> counts, row_of, row_token;
};

std::shared_ptr<Plan> make_plan(int N, int E, int k, int capacity, unsigned seed) {
  std::vector<int32_t> experts(size_t(N) * k);
  std::vector<int> perm(E);
  for (int n = 0; n < N; ++n) {
    for (int e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed + n));
    for (int j = 0; j < k; ++j) experts[size_t(n) * k + j] = perm[j];
  }
  auto p = std::make_shared<Plan>();
  p->counts.resize(E), p->row_of.resize(experts.size()), p->row_token.resize(experts.size());
  p->M = plan_dispatch(p->counts.data(), p->row_of.data(), p->row_token.data(), experts.data(), N,
                       E, k, capacity);
  return p;
}

// Permute: rows (M, C) = h[row_token]; its adjoint is the scatter-add over a token's kept
// choices (overwriting).
KernelCase permute_case(int N, int E, int k, int C, int capacity) {
  KernelCase kc;
  kc.name = str("permute_N", N, "_E", E, "_k", k, "_C", C, "_cap", capacity);
  auto plan = make_plan(N, E, k, capacity, 40);
  kc.inputs = {random_normal(size_t(N) * C, 41)};
  kc.output_sizes = {size_t(plan->M) * C};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, gather_rows, out[0].data(), in[0].data(), plan->row_token.data(), plan->M, C);
  };
  kc.backwards.push_back({"scatter_add",
                          {0},
                          false,
                          [=](Impl impl, const Bufs&, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, scatter_add_rows, din[0].data(), dout.data(),
                                        plan->row_of.data(), N, k, C);
                          }});
  return kc;
}

// Unpermute: y (N, C) = sum over kept choices of gate * rows[row_of]; the adjoints are the
// gate-scaled gather (to the rows) and the dot products (to the gates).
KernelCase unpermute_case(int N, int E, int k, int C, int capacity) {
  KernelCase kc;
  kc.name = str("unpermute_N", N, "_E", E, "_k", k, "_C", C, "_cap", capacity);
  auto plan = make_plan(N, E, k, capacity, 42);
  kc.inputs = {random_normal(size_t(plan->M) * C, 43), random_normal(size_t(N) * k, 44)};
  kc.output_sizes = {size_t(N) * C};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, combine_rows, out[0].data(), in[0].data(), plan->row_of.data(), in[1].data(),
                N, k, C);
  };
  kc.backwards.push_back({"to_rows",
                          {0},
                          false,
                          [=](Impl impl, const Bufs& in, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, gather_rows_scaled, din[0].data(), dout.data(),
                                        plan->row_of.data(), in[1].data(), N, k, C);
                          }});
  kc.backwards.push_back({"to_gates",
                          {1},
                          false,
                          [=](Impl impl, const Bufs& in, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, combine_rows_backward_gates, din[1].data(),
                                        dout.data(), in[0].data(), plan->row_of.data(), N, k, C);
                          }});
  return kc;
}

// Regrouping S sources x B local experts from source-major to expert-major order; the
// reverse regrouping is its adjoint. Some blocks are empty.
KernelCase regroup_case(int S, int B, int C) {
  KernelCase kc;
  kc.name = str("regroup_S", S, "_B", B, "_C", C);
  std::vector<int> r = random_ints(size_t(S) * B, 45, 0, 3);
  auto counts = std::make_shared<std::vector<int32_t>>(r.begin(), r.end());
  size_t rows = 0;
  for (int32_t c : *counts) rows += size_t(c);
  kc.inputs = {random_normal(rows * C, 46)};
  kc.output_sizes = {rows * C};
  kc.forward = [=](Impl impl, const Bufs& in, Bufs& out) {
    MT_DISPATCH(impl, regroup_blocks, out[0].data(), in[0].data(), counts->data(), S, B, C, true);
  };
  kc.backwards.push_back({"to_source_major",
                          {0},
                          false,
                          [=](Impl impl, const Bufs&, const Bufs&, const Buf& dout, Bufs& din) {
                            MT_DISPATCH(impl, regroup_blocks, din[0].data(), dout.data(),
                                        counts->data(), S, B, C, false);
                          }});
  return kc;
}

std::vector<KernelCase> make_cases() {
  std::vector<KernelCase> cases;
  for (bool bias : {true, false}) {
    cases.push_back(matmul_case(1, 1, 1, bias));
    cases.push_back(matmul_case(1, 7, 3, bias));
    cases.push_back(matmul_case(5, 17, 9, bias));
    cases.push_back(matmul_case(33, 64, 48, bias));
  }
  cases.push_back(matmul_case(128, 256, 768, true));
  cases.push_back(matmul_case(96, 32, 128, true));  // OC = 4 C: the transposed weight gradient
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back(sgemm_case(ta, tb, 7, 5, 3, 0));
      cases.push_back(sgemm_case(ta, tb, 33, 17, 65, 3));
    }
  cases.push_back(layernorm_case(1, 3));
  cases.push_back(layernorm_case(7, 13));
  cases.push_back(layernorm_case(32, 256));
  cases.push_back(layernorm_case(3, 1000));
  cases.push_back(gelu_case(1));
  cases.push_back(gelu_case(13));
  cases.push_back(gelu_case(1000));
  cases.push_back(bias_gelu_case(1, 5));
  cases.push_back(bias_gelu_case(9, 37));
  cases.push_back(attention_case(1, 1, 4, 1));
  cases.push_back(attention_case(2, 5, 12, 3));
  cases.push_back(attention_case(2, 33, 16, 1));
  cases.push_back(attention_case(1, 70, 24, 2));
  cases.push_back(attention_case(2, 128, 64, 4));
  cases.push_back(attention_case(1, 130, 8, 1));  // crosses the 128-row causal block
  // Head dims of the AVX-512 kernels (16/32/64/128), T off the 8-row and 32-key tiles.
  cases.push_back(attention_case(1, 1, 32, 2));
  cases.push_back(attention_case(2, 37, 64, 2));
  cases.push_back(attention_case(1, 45, 128, 2));
  cases.push_back(attention_case(1, 19, 128, 1));
  cases.push_back(attention_case(1, 67, 256, 4));
  cases.push_back(attention_case(1, 133, 64, 2));  // crosses the 128-query dk/dv block
  cases.push_back(crossentropy_case(1, 1, 1));
  cases.push_back(crossentropy_case(1, 5, 5));
  cases.push_back(crossentropy_case(7, 33, 40));
  cases.push_back(crossentropy_case(64, 256, 256));
  cases.push_back(embedding_case(1, 1, 3, 5, 0, 5, true));
  cases.push_back(embedding_case(2, 7, 19, 11, 0, 11, true));
  cases.push_back(embedding_case(2, 7, 19, 11, 4, 4, true));
  cases.push_back(embedding_case(3, 4, 8, 6, 0, 6, false));
  cases.push_back(router_case(1, 1, 1, false));
  cases.push_back(router_case(5, 4, 1, false));
  cases.push_back(router_case(7, 4, 2, false));
  cases.push_back(router_case(7, 6, 2, true));
  cases.push_back(router_case(3, 5, 5, false));  // k = E
  cases.push_back(router_case(16, 8, 3, true));
  cases.push_back(permute_case(1, 1, 1, 3, 0));
  cases.push_back(permute_case(9, 4, 2, 17, 0));
  cases.push_back(permute_case(9, 4, 2, 17, 3));  // capacity drops
  cases.push_back(unpermute_case(1, 1, 1, 3, 0));
  cases.push_back(unpermute_case(9, 4, 2, 17, 0));
  cases.push_back(unpermute_case(12, 3, 3, 8, 5));  // k = E, with drops
  cases.push_back(regroup_case(1, 1, 4));
  cases.push_back(regroup_case(3, 2, 5));
  cases.push_back(regroup_case(4, 3, 16));
  return cases;
}

const std::vector<KernelCase>& all_cases() {
  static const std::vector<KernelCase> cases = make_cases();
  return cases;
}

class KernelOp : public ::testing::TestWithParam<size_t> {};

TEST_P(KernelOp, MatchesReferenceAndFiniteDifferences) {
  const KernelCase& kc = all_cases()[GetParam()];
  SCOPED_TRACE(kc.name);
  check_kernel_case(kc);
}

INSTANTIATE_TEST_SUITE_P(All, KernelOp, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return all_cases()[info.param].name;
                         });

}  // namespace
}  // namespace mt::test
