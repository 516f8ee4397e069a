// The grouped GEMMs whose rows are summed into token rows in their store (grouped_gemm.h,
// *_into_tokens): the AMX driver (grouped_gemm_amx.cpp, Problem::tokens) in a one-thread
// team, where its items, and so each token's rows, run in row order.
#include <omp.h>

#include <atomic>

#include "core/error.h"
#include "kernels/grouped_gemm.h"
#include "kernels/grouped_gemm_kernels.h"
#include "kernels/phase_profile.h"

namespace mt {

namespace {

using grouped::Problem;
using grouped::Product;
using grouped::rows_problem;

// Off only under a ScopedGroupedGemmTokenSums; process-wide, as the path override.
std::atomic<bool> sums_on{true};

void run_into_tokens(Problem<bf16>& p, float* tokens, const int32_t* token, const float* scale) {
  MT_CHECK(grouped_bf16_sums_into_tokens(),
           "grouped GEMM into token rows: needs the AMX path in a one-thread team");
  const double rows = double(p.offset[p.groups]) - p.offset[0];
  const int N = p.N(), K = p.product == Product::forward ? p.C : p.OC;
  // The call's phase: the GEMM's FLOPs; bytes: its rows once, the token rows read and
  // written once per row, the rows stored where kept, every weight once.
  PhaseScope phase(
      Phase::gemm, 2.0 * rows * K * N,
      rows * (K * 2.0 + N * 8.0 + (p.out ? N * 4.0 : 0)) + double(p.groups) * K * N * 2);
  p.tokens = tokens, p.token = token, p.scale = scale;
  grouped::run_amx(p);
}

}  // namespace

bool grouped_bf16_sums_into_tokens() {
  return sums_on.load(std::memory_order_relaxed) &&
         grouped_gemm_path(true) == GroupedGemmPath::amx && omp_get_max_threads() == 1;
}

ScopedGroupedGemmTokenSums::ScopedGroupedGemmTokenSums(bool on) : saved_(sums_on.load()) {
  sums_on = on;
}

ScopedGroupedGemmTokenSums::~ScopedGroupedGemmTokenSums() {
  sums_on = saved_;
}

void grouped_matmul_bf16_forward_into_tokens(float* tokens, const int32_t* token,
                                             const float* scale, float* out, const bf16* inp,
                                             const bf16* const* weight, const int32_t* offset,
                                             int groups, int C, int OC,
                                             const uint32_t* const* packed) {
  Problem<bf16> p =
      rows_problem(Product::forward, out, inp, weight, offset, groups, C, OC, false, packed);
  run_into_tokens(p, tokens, token, scale);
}

void grouped_matmul_bf16_backward_input_into_tokens(float* tokens, const int32_t* token,
                                                    const bf16* dout, const bf16* const* weight,
                                                    const int32_t* offset, int groups, int C,
                                                    int OC, const uint32_t* const* packed) {
  Problem<bf16> p = rows_problem(Product::backward_input, nullptr, dout, weight, offset, groups, C,
                                 OC, false, packed);
  run_into_tokens(p, tokens, token, nullptr);
}

}  // namespace mt
