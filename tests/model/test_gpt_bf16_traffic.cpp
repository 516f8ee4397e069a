// What a GPT block moves besides its GEMMs under --precision bf16, counted with the phase
// profile (kernels/phase_profile.h), never timed. On the dense AMX tiles the MLP's GELU runs
// in the stores of the GEMMs beside it (kernels/dense_gemm_bf16.h, forward_gelu and
// backward_input_dgelu): no activation pass of its own, forward or backward; and the
// forward rounds what its GEMMs read as its kernels store it, the final norm's output too;
// the head's backward rounds the loss gradient once for its two GEMMs.
#include <gtest/gtest.h>

#include <vector>

#include "core/rng.h"
#include "kernels/dense_gemm_bf16.h"
#include "kernels/phase_profile.h"
#include "kernels/phase_totals_of.h"
#include "model/gpt.h"

namespace mt {
namespace {

// A tiny bf16 GPT and one microbatch of tokens.
struct TinyBf16 {
  ModelConfig cfg;
  int b = 2;
  std::vector<int> tokens, targets;
  GPT m;
  explicit TinyBf16(int layers)
      : cfg(config(layers)),
        m(cfg, GPT::whole_model(cfg), TensorParallelShard{}, b, {}, Recompute::none,
          Precision::bf16) {
    for (int i = 0; i < b * cfg.seq; ++i) {
      tokens.push_back(int(uniform01(3, 1, i) * cfg.vocab));
      targets.push_back(int(uniform01(3, 2, i) * cfg.vocab));
    }
    m.init(5);
  }
  static ModelConfig config(int layers) {
    ModelConfig c;
    c.layers = layers, c.dim = 32, c.heads = 2, c.seq = 8, c.vocab = 11;
    return c;
  }
  void train() {
    m.train_microbatch(tokens.data(), targets.data(), b, cfg.seq, 1.0f / (b * cfg.seq));
  }
  void eval() { m.eval_microbatch(tokens.data(), targets.data(), b, cfg.seq); }
};

PhaseTotals phases_of_second_step(int layers) {
  TinyBf16 t(layers);
  return phases_of_second_run([&] { t.train(); });
}

// Every tensor the forward keeps for a GEMM is rounded as its kernel stores it (norms, GELU,
// the attention core; the final norm too): no conversion pass, on either GEMM path.
TEST(GptBf16Traffic, ForwardMakesNoConversionPass) {
  if (!dense_bf16_path_available(DenseBf16Path::onednn)) GTEST_SKIP() << "no bf16 GEMM here";
  TinyBf16 t(2);
  EXPECT_EQ(phases_of_second_run([&] { t.eval(); }).calls[int(Phase::conversion)], 0u);
}

// The head's loss gradient is rounded once, in its own place, for both of its GEMMs: the
// step's conversion passes outside the blocks (the head's; the embedding makes none) are one.
TEST(GptBf16Traffic, HeadRoundsTheLossGradientOnce) {
  if (!dense_bf16_path_available(DenseBf16Path::onednn)) GTEST_SKIP() << "no bf16 GEMM here";
  const uint64_t one = phases_of_second_step(1).calls[int(Phase::conversion)];
  const uint64_t two = phases_of_second_step(2).calls[int(Phase::conversion)];
  EXPECT_EQ(one - (two - one), 1u)
      << one << " conversion passes with 1 layer, " << two << " with 2";
}

TEST(GptBf16Traffic, MlpGeluRunsInTheDenseTilesStores) {
  if (!dense_bf16_path_available(DenseBf16Path::amx))
    GTEST_SKIP() << "no AMX on this CPU: the GELU is a pass of its own there";
  {
    const ScopedDenseBf16Path tiles(DenseBf16Path::amx);
    EXPECT_EQ(phases_of_second_step(2).calls[int(Phase::activation)], 0u);
  }
  if (dense_bf16_path_available(DenseBf16Path::onednn)) {
    const ScopedDenseBf16Path onednn(DenseBf16Path::onednn);
    // The composition: a GELU forward and a GELU backward pass per layer.
    EXPECT_EQ(phases_of_second_step(2).calls[int(Phase::activation)], 4u);
  }
}

}  // namespace
}  // namespace mt
