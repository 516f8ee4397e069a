// The dense bf16 linears on AMX tiles: the grouped GEMM's AMX kernel (grouped_gemm_amx.cpp)
// run as one group of all N rows, with the weight packed once per change of the weights
// (grouped_gemm_prepack.cpp's layout), or oneDNN through matmul_bf16.h.
#include "kernels/dense_gemm_bf16.h"

#include <atomic>
#include <cstring>

#include <omp.h>

#include "core/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/grouped_gemm_kernels.h"
#include "kernels/grouped_gemm_work.h"
#include "kernels/matmul_bf16.h"
#include "kernels/phase_profile.h"

namespace mt {

namespace {

// The path ScopedDenseBf16Path forces (-1: none). Process-wide, so that a test or a
// benchmark reaches the rank threads it starts.
std::atomic<int> path_override{-1};

// The bf16 rounding of w, packed in both layouts: the rounding goes through a buffer freed
// on return (once per change of the weights), so no plain copy outlives the packs.
void pack_both(std::vector<uint32_t> (&dst)[2], const float* w, int C, int OC) {
  std::vector<bf16> w16(size_t(C) * OC);
  to_bf16(w16.data(), w, w16.size());
  for (const GroupedPack which : {GroupedPack::forward, GroupedPack::backward_input}) {
    std::vector<uint32_t>& d = dst[int(which)];
    d.resize(grouped_bf16_packed_size(which, C, OC));
    grouped_bf16_pack(d.data(), which, w16.data(), C, OC);
  }
}

// One group of all N rows on the AMX kernel; weight (the packed one) is read through
// Problem::packed only, so Problem::weight points at a null.
void run_amx(grouped::Product product, float* out, float* const* dweight, const bf16* rows,
             const bf16* inp, const uint32_t* packed, int N, int C, int OC, bool accumulate) {
  const int32_t offset[2] = {0, N};
  const bf16* no_weight = nullptr;
  grouped::Problem<bf16> p{product, out, dweight, rows, inp,       &no_weight,
                           offset,  1,   C,       OC,   accumulate};
  p.packed = packed ? &packed : nullptr;
  grouped::run_amx(p);
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
  const std::string onednn =
      "oneDNN " + matmul_bf16_isa() + " (" +
      (matmul_bf16_path() == Bf16GemmPath::jit_gemm ? "jit_gemm" : "matmul primitive") + ")";
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
  if (N <= 0) return;
  // The bias goes in first and the tiles accumulate onto it (their C load): one write-only
  // pass instead of a read-modify-write pass after the product. Serial: a second parallel
  // region per call costs more than the copy on busy cores.
  if (bias)
    for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * OC, bias, size_t(OC) * sizeof(float));
  run_amx(grouped::Product::forward, out, nullptr, inp, nullptr, packed, N, C, OC, bias != nullptr);
}

void dense_bf16_backward_input(float* dinp, const bf16* dout, DenseBf16Weight& w, const float* w32,
                               int N, bool accumulate) {
  const int C = w.in(), OC = w.out();
  if (!w.runs_on_tiles())
    return matmul_bf16_backward_input(dinp, dout, w.copy(w32), N, C, OC, accumulate);
  const uint32_t* packed = w.packed(w32, GroupedPack::backward_input);
  PhaseScope phase(Phase::gemm, 2.0 * N * C * OC,
                   2.0 * (double(N) * OC + double(OC) * C) + 8.0 * double(N) * C);
  if (N <= 0) return;
  run_amx(grouped::Product::backward_input, dinp, nullptr, dout, nullptr, packed, N, C, OC,
          accumulate);
}

void dense_bf16_backward_weight(float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                                int N, int C, int OC) {
  // oneDNN on both paths: the tile kernel's weight gradient (K = the rows, dout transposed
  // and the input packed per call) measured 1.2-2x slower than oneDNN's at every model
  // shape (bench_dense_bf16, docs/kernels.md), whatever the chunking of its rows.
  matmul_bf16_backward_weight(dweight, dbias, dout, inp, N, C, OC);
}

}  // namespace mt
