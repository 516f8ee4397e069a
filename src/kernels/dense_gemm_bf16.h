// The dense linear layers' bf16 GEMMs (--precision bf16, docs/precision.md) and the bf16
// weight they read. Two kernels can run them (DenseBf16Path), picked at run time by the CPU,
// the rank's team (amx in 1-thread ranks) and the layer's width (kDenseBf16TilesMaxOut):
//  - amx: forward and backward_input on the grouped GEMM's AMX tile kernel
//    (kernels/grouped_gemm.h) as one group, reading the weight packed once per change of
//    the weights in the two layouts it multiplies by (GroupedPack: weight^T for forward,
//    weight for backward_input). oneDNN's matmul re-lays its B operand into the tile format
//    on every call and pays a per-call set-up that weighs at the model's shapes (M 1024,
//    K 256); the pack is made once for every microbatch, recomputation and backward of one
//    version of the weights. backward_weight stays on oneDNN (its B is the activations,
//    nothing to pack once; the tile kernel measured slower there);
//  - onednn: kernels/matmul_bf16.h (oneDNN's matmul primitive or its JIT gemm routine),
//    reading the weight's plain bf16 copy: the default without AMX, and the fallback.
// Same shapes and rules as matmul_bf16.h: out (N, OC) = inp (N, C) @ weight^T (OC, C) + bias;
// backward_input (+)= dout @ weight; backward_weight += dout^T @ inp, dbias += column sums.
//
// Bits: on the amx path a forward or input-gradient row depends only on that row and the
// weight (K summed in steps of 32 in order from the bias, whatever the row count, the team
// or the fused epilogue: dense_gemm_bf16_amx.h): no row
// pieces there (docs/precision.md, "Row pieces and bits"). The two paths' bits differ from each
// other (other summation orders); both accumulate in fp32 and round nothing but their inputs (the
// bounds of tests/kernels/test_bf16.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/bf16_weight.h"
#include "kernels/grouped_gemm.h"

namespace mt {

enum class DenseBf16Path { onednn, amx };

// On the amx path, a layer of more outputs than this (the LM head at real vocabularies) runs
// on oneDNN from its plain copy, forward and input gradient alike. Measured with
// `bench_dense_bf16 --shapes head` (1 thread, M 1024, docs/kernels.md): at 8192 and 32000
// outputs the tile kernel's input gradient (K = the outputs) ran 1.4-1.8x slower than
// oneDNN's, and packing both layouts once per optimizer step cost more than the forward
// saved (a 32000 x 256 head: conversion 38 -> 56 ms a step at 1024 tokens). Up to 2048
// outputs (every layer of the models measured) the tiles were faster.
constexpr int kDenseBf16TilesMaxOut = 4096;

// The one rule of where the tiles run, read by the engine (dense_bf16_default_path,
// DenseBf16Weight::on_tiles) and by the planner's local pricing (plan/hardware_costs.cpp),
// so that the planner prices the kernel the engine runs: a rank of `team` threads on a CPU
// with AMX (`amx`) runs them, and a layer of `out` outputs runs on them on that path.
constexpr bool dense_bf16_team_on_tiles(bool amx, int team) {
  return amx && team == 1;
}
constexpr bool dense_bf16_layer_on_tiles(double out) {
  return out <= kDenseBf16TilesMaxOut;
}

// amx where amx::available() (kernels/amx_tiles.h) and the rank computes on one thread (team:
// its OpenMP threads), onednn elsewhere.
bool dense_bf16_path_available(DenseBf16Path path);
DenseBf16Path dense_bf16_default_path(int team);
// The calling rank's default (its team: omp_get_max_threads()), or a ScopedDenseBf16Path's.
DenseBf16Path dense_bf16_path();
// The kernels a path runs, for logs and the step breakdown: on amx "AMX tiles, weights
// packed once per change (dense_gemm_bf16) forward and input gradients; oneDNN ... weight
// gradients", on onednn "oneDNN " + matmul_bf16_isa() + its routine.
std::string dense_bf16_isa(DenseBf16Path path);
std::string dense_bf16_isa();

// Overrides the path for the whole process while it lives (tests and bench_dense_bf16
// compare the two, including from the rank threads they start; training never sets it).
// A path not available is refused (MT_CHECK).
class ScopedDenseBf16Path {
 public:
  explicit ScopedDenseBf16Path(DenseBf16Path path);
  ~ScopedDenseBf16Path();
  ScopedDenseBf16Path(const ScopedDenseBf16Path&) = delete;
  ScopedDenseBf16Path& operator=(const ScopedDenseBf16Path&) = delete;

 private:
  int saved_;
};

// One linear layer's bf16 weight (OC, C): the plain copy of kernels/bf16_weight.h for the
// onednn path, the two packs for the amx path, each made at its path's first use after the
// model's weight version moved (GPT::weights_changed), from the fp32 weight bound then
// (under ZeRO-3 a gathered buffer that may be gone by the backward: both packs are made
// at once, so the backward never reads it). On AMX the plain copy is made only for a layer
// too wide for the tiles (kDenseBf16TilesMaxOut), which never packs.
class DenseBf16Weight {
 public:
  DenseBf16Weight(int C, int OC, const uint64_t* version);

  // The plain copy (onednn path), converted if the weights changed since.
  const bf16* copy(const float* w) { return copy_.get(w); }
  // The plain copy itself when this layer's GEMMs read it (not on the tiles), else null: a
  // writer ahead of use fills it (kernels/bf16_weight.h).
  Bf16Weight* plain_copy() { return runs_on_tiles() ? nullptr : &copy_; }
  // The pack for `which` (amx path), both packed if the weights changed since.
  const uint32_t* packed(const float* w, GroupedPack which);

  // The larger of the two paths' memory (the two packs; the plain copy for a layer too wide
  // for the tiles), whatever the CPU, so that an estimate does not depend on the machine
  // that makes it (the planner's plans).
  size_t bytes() const;
  static size_t bytes(int C, int OC);
  // Times both layouts were packed (once per change of the weights used on the amx path).
  int64_t packs() const { return packs_; }
  // Whether a layer of OC outputs runs on the tiles when the path is amx, and whether this
  // one runs there now (the amx path and not too wide).
  static bool on_tiles(int OC);
  bool runs_on_tiles() const;
  int in() const { return C_; }
  int out() const { return OC_; }

 private:
  int C_, OC_;
  const uint64_t* version_;
  Bf16Weight copy_;
  std::vector<uint32_t> packs_of_[2];  // GroupedPack::forward, backward_input
  uint64_t packed_version_ = ~uint64_t(0);
  int64_t packs_ = 0;
};

// out (N, OC) = inp (N, C) @ weight^T + bias (may be null); w32 is the fp32 weight, read
// only when the path's copy or packs are older than the weights.
void dense_bf16_forward(float* out, const bf16* inp, DenseBf16Weight& w, const float* w32,
                        const float* bias, int N);
// dinp (N, C) += dout (N, OC) @ weight; with accumulate false, dinp = (overwritten).
void dense_bf16_backward_input(float* dinp, const bf16* dout, DenseBf16Weight& w, const float* w32,
                               int N, bool accumulate);

// The GPT MLP's GELU with the GEMMs beside it (kernels/gelu.h's values):
//  - forward_gelu: pre (N, OC) = inp @ weight^T + bias (kept for the backward) and act (N, OC)
//    = bf16(gelu(pre)), the next GEMM's operand;
//  - backward_input_dgelu: dinp (N, C) = bf16(gelu'(pre) * (dout @ weight)), pre (N, C).
// On the tiles (runs_on_tiles) the bias starts the accumulators and the activation runs in
// the stores (dense_gemm_bf16_amx.h): no pass of its own, and the fp32 product of the
// backward never reaches memory. Elsewhere the composition: the GEMM (with the bias in the
// primitive's epilogue where matmul_bf16_bias_on_primitive), then gelu_forward_bf16 (or
// bias_gelu_forward_bf16 on the gemm routine) or gelu_backward_bf16 (through `stage`, (N, C)
// fp32).
void dense_bf16_forward_gelu(float* pre, bf16* act, const bf16* inp, DenseBf16Weight& w,
                             const float* w32, const float* bias, int N);
void dense_bf16_backward_input_dgelu(bf16* dinp, const float* pre, const bf16* dout,
                                     DenseBf16Weight& w, const float* w32, int N, float* stage);
// dweight (OC, C) += dout^T @ inp; dbias (OC) += column sums of dout (may be null).
void dense_bf16_backward_weight(float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                int N, int C, int OC);

}  // namespace mt
