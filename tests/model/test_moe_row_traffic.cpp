// What the MoE layer moves besides its GEMMs (docs/moe.md, "Grouped experts"), counted with
// the phase profile (kernels/phase_profile.h), never timed. At ep = 1 nothing travels, so
// the kept rows go from the tokens straight into the experts' input form and back: per
// forward + backward four permutation passes (the gather, the gate-weighted combine, its
// adjoint in one pass with the gates' gradient, the scatter-add of the input gradients),
// no copy of the rows between the experts and the combine, and in bf16 no fp32 block of
// rows rounded afterwards (the gathers round each row as they pack it). On the AMX path the
// bf16 SwiGLU experts' activation runs in the stores of the GEMMs beside it
// (grouped_gemm.h, *_swiglu): no activation pass of its own over fp32 rows in memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/grouped_gemm.h"
#include "kernels/phase_profile.h"
#include "model/moe_test_util.h"

namespace mt {
namespace {

using moe_test::Harness;

ModelConfig llama_config() {
  ModelConfig cfg = moe_test::config(32, 4, 2, 0.0f);
  cfg.arch = Arch::llama, cfg.heads = 2, cfg.expert_ffn_dim = 16;
  return cfg;
}

// passes: 4 (the gathers and the sums), or 2 where the bf16 SwiGLU experts run the sums in
// their GEMMs' stores (tests/model/test_moe_token_sums.cpp).
void expect_rows_packed_once(const ModelConfig& cfg, bool bf16, uint64_t passes = 4) {
  const int N = 24, C = cfg.dim;
  uint64_t version = 1;
  ExpertParallelShard ep;
  if (bf16) ep.bf16_version = &version;
  Harness m(cfg, ep, N);
  const PhaseTotals totals = moe_test::phases_of_second_pass(m, N, C);
  EXPECT_EQ(totals.calls[int(Phase::conversion)], 0u);
  EXPECT_EQ(totals.calls[int(Phase::permutation)], passes);
  EXPECT_GT(totals.calls[int(Phase::gemm)], 0u);  // the grouped GEMMs are profiled too
}

TEST(MoeRowTraffic, Ep1PacksTheRowsOnceFp32) {
  expect_rows_packed_once(moe_test::config(32, 4, 2, 0.0f), false);
  expect_rows_packed_once(llama_config(), false);
}

TEST(MoeRowTraffic, Ep1PacksTheRowsOnceBf16) {
  expect_rows_packed_once(moe_test::config(32, 4, 2, 0.0f), true);
  expect_rows_packed_once(llama_config(), true,
                          grouped_gemm_path_available(true, GroupedGemmPath::amx) ? 2u : 4u);
  const ScopedGroupedGemmTokenSums off(false);
  expect_rows_packed_once(llama_config(), true);
}

// Activation passes of the llama experts' second forward + backward at ep 1 in bf16.
uint64_t bf16_activation_passes() {
  const ModelConfig cfg = llama_config();
  const int N = 24;
  uint64_t version = 1;
  ExpertParallelShard ep;
  ep.bf16_version = &version;
  Harness m(cfg, ep, N);
  return moe_test::phases_of_second_pass(m, N, cfg.dim).calls[int(Phase::activation)];
}

TEST(MoeRowTraffic, Bf16SwigluRunsInTheGemmStoresOnAmx) {
  if (!grouped_gemm_path_available(true, GroupedGemmPath::amx))
    GTEST_SKIP() << "no AMX on this CPU: the SwiGLU is a pass of its own there";
  EXPECT_EQ(bf16_activation_passes(), 0u);
  {
    const ScopedGroupedGemmPacks per_call(false);  // fused whether or not the weights are packed
    EXPECT_EQ(bf16_activation_passes(), 0u);
  }
  if (grouped_gemm_path_available(true, GroupedGemmPath::avx512_bf16)) {
    const ScopedGroupedGemmPath other(true, GroupedGemmPath::avx512_bf16);
    EXPECT_EQ(bf16_activation_passes(), 2u);  // the composition: forward and backward
  }
}

}  // namespace
}  // namespace mt
