// The dense bf16 linears on AMX tiles: the grouped GEMM's AMX kernel (grouped_gemm_amx.cpp)
// run as one group of all N rows, with the weight packed once per change of the weights
// (grouped_gemm_prepack.cpp's layout), or oneDNN through matmul_bf16.h.
#include "kernels/dense_gemm_bf16.h"

#include <algorithm>
#include <atomic>

#include <omp.h>

#include "core/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/dense_gemm_bf16_amx.h"
#include "kernels/gelu.h"
#include "kernels/grouped_gemm.h"
#include "kernels/grouped_gemm_pack.h"
#include "kernels/matmul_bf16.h"
#include "kernels/phase_profile.h"

namespace mt {

namespace {

// The path ScopedDenseBf16Path forces (-1: none). Process-wide, so that a test or a
// benchmark reaches the rank threads it starts.
std::atomic<int> path_override{-1};

// The bf16 rounding of w (OC, C), packed in both layouts in one pass over the fp32 weight: a
// block of kBlockRows rows at a time is rounded into a per-thread buffer (L1/L2) and packed
// from there into its two output panels of the forward pack (B = w^T: the rows are B's
// columns) and its kBlockRows / 2 pair rows of every panel of the backward_input pack (B = w).
// The values are those of grouped_bf16_pack over to_bf16(w); the fp32 weight is read once and
// no whole bf16 copy is written and read back. The blocks are spread over the team.
constexpr int kBlockRows = 32;  // two forward panels; 16 pair rows of the backward pack

#if defined(__AVX512F__)
void pack_block(std::vector<uint32_t> (&dst)[2], const float* w, int C, int OC, int r0,
                std::vector<bf16>& buf) {
  const int rows = std::min(kBlockRows, OC - r0);
  buf.resize(size_t(kBlockRows) * C);
  to_bf16(buf.data(), w + size_t(r0) * C, size_t(rows) * C);
  const int kp_fwd = (C + 31) / 32 * 16, kp_bwd = (OC + 31) / 32 * 16;
  uint32_t* fwd = dst[int(GroupedPack::forward)].data();
  for (int h = 0; h < 2 && 16 * h < rows; ++h)  // output rows r0 + 16h...: one forward panel
    grouped::pack_pairs_bf16(fwd + size_t(r0 / 16 + h) * kp_fwd * 16,
                             buf.data() + size_t(16 * h) * C, size_t(C), true, C, kp_fwd, 0,
                             std::min(16, rows - 16 * h));
  uint32_t* bwd = dst[int(GroupedPack::backward_input)].data();
  for (int q = 0; q < (C + 15) / 16; ++q)  // the block's pair rows of every backward panel
    grouped::pack_pairs_bf16(bwd + (size_t(q) * kp_bwd + r0 / 2) * 16, buf.data(), size_t(C), false,
                             rows, kBlockRows / 2, 16 * q, std::min(C, 16 * q + 16));
}
#else
void pack_block(std::vector<uint32_t> (&)[2], const float*, int, int, int, std::vector<bf16>&) {
  MT_CHECK(false, "dense bf16 packs need an AVX-512 build");
}
#endif

void pack_both(std::vector<uint32_t> (&dst)[2], const float* w, int C, int OC) {
  for (const GroupedPack which : {GroupedPack::forward, GroupedPack::backward_input})
    dst[int(which)].resize(grouped_bf16_packed_size(which, C, OC));
  const int blocks = (OC + kBlockRows - 1) / kBlockRows;
#pragma omp parallel for schedule(static) if (blocks > 1 && omp_get_max_threads() > 1)
  for (int b = 0; b < blocks; ++b) {
    thread_local std::vector<bf16> buf;
    pack_block(dst, w, C, OC, b * kBlockRows, buf);
  }
}

// The tile driver's call on the packed weight: A (M = N rows, K) row-major.
dense_amx::Gemm tiles_gemm(const bf16* a, const uint32_t* packed, int N, int K, int cols) {
  dense_amx::Gemm g;
  g.a = a, g.b = packed, g.M = N, g.K = K, g.N = cols;
  return g;
}

}  // namespace

bool dense_bf16_path_available(DenseBf16Path path) {
  return path == DenseBf16Path::onednn ? bf16_matmul_supported() : amx::available();
}

DenseBf16Path dense_bf16_default_path(int team) {
  // Measured on the model's shapes (bench_dense_bf16 and bench step alternated, docs/kernels.md):
  // in a 1-thread rank the packed tile kernel ran ahead of oneDNN's brgemm AMX primitive
  // (4L d256 bf16 step -3 to -6%, llama -5 to -8%, 6L d512 -9%); in a 2-thread rank behind
  // it (GEMM phase 29.3 against 26.2 ms, step +4 to +8%), so a wider team keeps oneDNN.
  static const bool amx = dense_bf16_path_available(DenseBf16Path::amx);
  return dense_bf16_team_on_tiles(amx, team) ? DenseBf16Path::amx : DenseBf16Path::onednn;
}

DenseBf16Path dense_bf16_path() {
  const int over = path_override.load(std::memory_order_relaxed);
  return over < 0 ? dense_bf16_default_path(omp_get_max_threads()) : DenseBf16Path(over);
}

std::string dense_bf16_isa(DenseBf16Path path) {
  const Bf16GemmPath routine = matmul_bf16_path();
  const std::string onednn =
      "oneDNN " + matmul_bf16_isa() + " (" +
      (routine == Bf16GemmPath::jit_gemm ? "jit_gemm"
       : routine == Bf16GemmPath::mixed
           ? "jit_gemm; forwards with a bias on the matmul primitive, bias in its epilogue"
           : "matmul primitive") +
      ")";
  if (path == DenseBf16Path::onednn) return onednn;
  return "AMX tiles, weights packed once per change (dense_gemm_bf16) forward and input "
         "gradients of layers of up to " +
         std::to_string(kDenseBf16TilesMaxOut) + " outputs; " + onednn +
         " weight gradients and wider layers (the head)";
}

std::string dense_bf16_isa() {
  return dense_bf16_isa(dense_bf16_path());
}

ScopedDenseBf16Path::ScopedDenseBf16Path(DenseBf16Path path) : saved_(path_override.load()) {
  MT_CHECK(dense_bf16_path_available(path), "the dense bf16 GEMM path ", int(path),
           " is not available on this CPU");
  path_override = int(path);
}

ScopedDenseBf16Path::~ScopedDenseBf16Path() {
  path_override = saved_;
}

DenseBf16Weight::DenseBf16Weight(int C, int OC, const uint64_t* version)
    : C_(C), OC_(OC), version_(version), copy_(size_t(C) * OC, version) {}

bool DenseBf16Weight::on_tiles(int OC) {
  return dense_bf16_layer_on_tiles(OC);
}

bool DenseBf16Weight::runs_on_tiles() const {
  return on_tiles(OC_) && dense_bf16_path() == DenseBf16Path::amx;
}

const uint32_t* DenseBf16Weight::packed(const float* w, GroupedPack which) {
  if (packed_version_ != *version_) {
    MT_CHECK(w != nullptr, "bf16 weight packs of an unbound layer");
    PhaseScope phase(Phase::conversion, 0, 10.0 * double(C_) * OC_);
    pack_both(packs_of_, w, C_, OC_);
    packed_version_ = *version_;
    ++packs_;
  }
  return packs_of_[int(which)].data();
}

size_t DenseBf16Weight::bytes() const {
  return bytes(C_, OC_);
}

size_t DenseBf16Weight::bytes(int C, int OC) {
  if (!on_tiles(OC)) return size_t(C) * OC * sizeof(bf16);  // the plain copy on every CPU
  return (grouped_bf16_packed_size(GroupedPack::forward, C, OC) +
          grouped_bf16_packed_size(GroupedPack::backward_input, C, OC)) *
         sizeof(uint32_t);
}

void dense_bf16_forward(float* out, const bf16* inp, DenseBf16Weight& w, const float* w32,
                        const float* bias, int N) {
  const int C = w.in(), OC = w.out();
  if (!w.runs_on_tiles()) return matmul_bf16_forward(out, inp, w.copy(w32), bias, N, C, OC);
  const uint32_t* packed = w.packed(w32, GroupedPack::forward);
  PhaseScope phase(Phase::gemm, 2.0 * N * C * OC,
                   2.0 * (double(N) * C + double(OC) * C) + 4.0 * double(N) * OC);
  dense_amx::Gemm g = tiles_gemm(inp, packed, N, C, OC);
  g.c = out, g.bias = bias;  // the bias is the tiles' start: no pass of its own
  dense_amx::run(g);
}

void dense_bf16_forward_gelu(float* pre, bf16* act, const bf16* inp, DenseBf16Weight& w,
                             const float* w32, const float* bias, int N) {
  const int C = w.in(), OC = w.out();
  if (!w.runs_on_tiles()) {
    // Where the primitive adds the bias in its epilogue, GELU's pass only reads pre; on the
    // gemm routine (no bias of its own) the pass adds it, as pre is written back there anyway.
    if (!matmul_bf16_bias_on_primitive()) {
      matmul_bf16_forward(pre, inp, w.copy(w32), nullptr, N, C, OC);
      return bias_gelu_forward_bf16(act, pre, bias, N, OC);
    }
    matmul_bf16_forward(pre, inp, w.copy(w32), bias, N, C, OC);
    return gelu_forward_bf16(act, pre, size_t(N) * OC);
  }
  const uint32_t* packed = w.packed(w32, GroupedPack::forward);
  // The fused call's bytes: its operands once, pre (fp32) and act (bf16) written.
  PhaseScope phase(Phase::gemm, 2.0 * N * C * OC,
                   2.0 * (double(N) * C + double(OC) * C) + 6.0 * double(N) * OC);
  dense_amx::Gemm g = tiles_gemm(inp, packed, N, C, OC);
  g.c = pre, g.bias = bias, g.epilogue = dense_amx::Epilogue::gelu, g.act = act;
  dense_amx::run(g);
}

void dense_bf16_backward_input(float* dinp, const bf16* dout, DenseBf16Weight& w, const float* w32,
                               int N, bool accumulate) {
  const int C = w.in(), OC = w.out();
  if (!w.runs_on_tiles())
    return matmul_bf16_backward_input(dinp, dout, w.copy(w32), N, C, OC, accumulate);
  const uint32_t* packed = w.packed(w32, GroupedPack::backward_input);
  PhaseScope phase(Phase::gemm, 2.0 * N * C * OC,
                   2.0 * (double(N) * OC + double(OC) * C) + 8.0 * double(N) * C);
  dense_amx::Gemm g = tiles_gemm(dout, packed, N, OC, C);
  g.c = dinp, g.accumulate = accumulate;
  dense_amx::run(g);
}

void dense_bf16_backward_input_dgelu(bf16* dinp, const float* pre, const bf16* dout,
                                     DenseBf16Weight& w, const float* w32, int N, float* stage) {
  const int C = w.in(), OC = w.out();
  if (!w.runs_on_tiles()) {
    matmul_bf16_backward_input(stage, dout, w.copy(w32), N, C, OC, false);
    return gelu_backward_bf16(dinp, pre, stage, size_t(N) * C);
  }
  const uint32_t* packed = w.packed(w32, GroupedPack::backward_input);
  // The fused call's bytes: its operands once, pre read, dinp (bf16) written.
  PhaseScope phase(Phase::gemm, 2.0 * N * C * OC,
                   2.0 * (double(N) * OC + double(OC) * C) + 6.0 * double(N) * C);
  dense_amx::Gemm g = tiles_gemm(dout, packed, N, OC, C);
  g.epilogue = dense_amx::Epilogue::dgelu, g.act = dinp, g.pre = pre;
  dense_amx::run(g);
}

void dense_bf16_backward_weight(float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                int N, int C, int OC) {
  // oneDNN on both paths: the tile kernel's weight gradient (K = the rows, dout transposed
  // and the input packed per call) measured 1.2-2x slower than oneDNN's at every model
  // shape (bench_dense_bf16, docs/kernels.md), whatever the chunking of its rows.
  matmul_bf16_backward_weight(dweight, dbias, dout, inp, N, C, OC);
}

}  // namespace mt
