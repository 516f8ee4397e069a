// The bf16 weights packed once for the AMX and AVX512-BF16 paths (grouped_gemm.h,
// GroupedPack): the whole matrix in the pair panels a call would pack per column block
// (grouped_gemm_pack.h), K padded to the AMX kernel's step of 32 (packed_panel_pairs), so
// that an item's block is panels n0 / 16 on.
#include <atomic>

#include "core/error.h"
#include "kernels/grouped_gemm.h"
#include "kernels/grouped_gemm_pack.h"

namespace mt {

namespace {

// Whether the bf16 calls may read packs (ScopedGroupedGemmPacks; process-wide, so that a
// test reaches the rank threads it starts, as the path override).
std::atomic<bool> packs_on{true};

// The product's K and N for a weight (OC, C): forward multiplies by weight^T.
struct Shape {
  int K, N;
};
Shape shape_of(GroupedPack which, int C, int OC) {
  return which == GroupedPack::forward ? Shape{C, OC} : Shape{OC, C};
}

}  // namespace

size_t grouped_bf16_packed_size(GroupedPack which, int C, int OC) {
  const Shape s = shape_of(which, C, OC);
  const size_t panels = size_t(s.N + grouped::kPanelBf16 - 1) / grouped::kPanelBf16;
  return size_t(grouped::packed_panel_pairs(s.K)) * panels * grouped::kPanelBf16;
}

void grouped_bf16_pack(uint32_t* dst, GroupedPack which, const bf16* weight, int C, int OC) {
#if defined(__AVX512F__)
  const Shape s = shape_of(which, C, OC);
  grouped::pack_pairs_bf16(dst, weight, size_t(C), which == GroupedPack::forward, s.K,
                           grouped::packed_panel_pairs(s.K), 0, s.N);
#else
  (void)dst, (void)which, (void)weight, (void)C, (void)OC;
  MT_CHECK(false, "grouped GEMM packs need an AVX-512 build");
#endif
}

bool grouped_bf16_reads_packs() {
  const GroupedGemmPath path = grouped_gemm_path(true);
  return packs_on.load(std::memory_order_relaxed) &&
         (path == GroupedGemmPath::amx || path == GroupedGemmPath::avx512_bf16);
}

ScopedGroupedGemmPacks::ScopedGroupedGemmPacks(bool on) : saved_(packs_on.load()) {
  packs_on = on;
}

ScopedGroupedGemmPacks::~ScopedGroupedGemmPacks() {
  packs_on = saved_;
}

}  // namespace mt
