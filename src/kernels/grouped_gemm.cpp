#include "kernels/grouped_gemm.h"

#include <atomic>
#include <type_traits>

#include "core/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/grouped_gemm_kernels.h"
#include "kernels/matmul_bf16.h"
#include "kernels/phase_profile.h"

namespace mt {

namespace {

using grouped::Problem;
using grouped::Product;
using grouped::rows_problem;

// The path ScopedGroupedGemmPath forces per precision (-1: none; [0] fp32, [1] bf16).
// Process-wide, so that a test or a benchmark reaches the rank threads it starts.
std::atomic<int> path_override[2] = {-1, -1};

template <typename T>
void run(const Problem<T>& p) {
  MT_CHECK(p.groups >= 0 && p.C > 0 && p.OC > 0, "grouped GEMM of ", p.groups, " groups, C ", p.C,
           ", OC ", p.OC);
  for (int g = 0; g < p.groups; ++g)
    MT_CHECK(p.offset[g] <= p.offset[g + 1], "grouped GEMM: group ", g, " ends before it starts (",
             p.offset[g], " > ", p.offset[g + 1], ")");
  constexpr bool bf16 = std::is_same_v<T, mt::bf16>;
  // Each group's rows meet its weight once: 2 rows C OC FLOPs; bytes: the rows and the
  // results (or gradients) once, every group's weight once.
  const double rows = double(p.offset[p.groups]) - p.offset[0];
  const double io = p.product == Product::backward_weight ? rows * (p.C + p.OC) * sizeof(T)
                                                          : rows * (p.C * sizeof(T) + p.OC * 4.0);
  PhaseScope phase(Phase::gemm, 2.0 * rows * p.C * p.OC,
                   io + double(p.groups) * p.C * p.OC * (sizeof(T) + 4.0));
  switch (grouped_gemm_path(bf16)) {
    case GroupedGemmPath::portable:
      return grouped::run_portable(p);
    case GroupedGemmPath::loop:
      return grouped::run_loop(p);
    case GroupedGemmPath::avx512:
    case GroupedGemmPath::avx512_bf16:
    case GroupedGemmPath::amx:
      break;
  }
  if constexpr (bf16) {
    if (grouped_gemm_path(true) == GroupedGemmPath::amx) return grouped::run_amx(p);
    grouped::run_avx512_bf16(p);
  } else {
    grouped::run_fp32(p);
  }
}

template <typename T>
Problem<T> weight_problem(float* const* dweight, const T* dout, const T* inp, const int32_t* offset,
                          int groups, int C, int OC) {
  return {
      Product::backward_weight, nullptr, dweight, dout, inp, nullptr, offset, groups, C, OC, true};
}

}  // namespace

void grouped_matmul_forward(float* out, const float* inp, const float* const* weight,
                            const int32_t* offset, int groups, int C, int OC) {
  run(rows_problem(Product::forward, out, inp, weight, offset, groups, C, OC, false));
}

void grouped_matmul_backward_input(float* dinp, const float* dout, const float* const* weight,
                                   const int32_t* offset, int groups, int C, int OC,
                                   bool accumulate) {
  run(rows_problem(Product::backward_input, dinp, dout, weight, offset, groups, C, OC, accumulate));
}

void grouped_matmul_backward_weight(float* const* dweight, const float* dout, const float* inp,
                                    const int32_t* offset, int groups, int C, int OC) {
  run(weight_problem(dweight, dout, inp, offset, groups, C, OC));
}

void grouped_matmul_bf16_forward(float* out, const bf16* inp, const bf16* const* weight,
                                 const int32_t* offset, int groups, int C, int OC,
                                 const uint32_t* const* packed) {
  run(rows_problem(Product::forward, out, inp, weight, offset, groups, C, OC, false, packed));
}

void grouped_matmul_bf16_backward_input(float* dinp, const bf16* dout, const bf16* const* weight,
                                        const int32_t* offset, int groups, int C, int OC,
                                        bool accumulate, const uint32_t* const* packed) {
  run(rows_problem(Product::backward_input, dinp, dout, weight, offset, groups, C, OC, accumulate,
                   packed));
}

void grouped_matmul_bf16_backward_weight(float* const* dweight, const bf16* dout, const bf16* inp,
                                         const int32_t* offset, int groups, int C, int OC) {
  run(weight_problem(dweight, dout, inp, offset, groups, C, OC));
}

bool grouped_gemm_path_available(bool bf16, GroupedGemmPath path) {
  switch (path) {
    case GroupedGemmPath::portable:
      return true;
    case GroupedGemmPath::loop:
      return !bf16 || bf16_matmul_supported();
    case GroupedGemmPath::avx512:
      return !bf16 && grouped::fp32_kernels_available();
    case GroupedGemmPath::avx512_bf16:
      return bf16 && grouped::avx512_bf16_available();
    case GroupedGemmPath::amx:
      return bf16 && amx::available();
  }
  return false;
}

GroupedGemmPath grouped_gemm_default_path(bool bf16) {
  // fp32: oneDNN's sgemm once per group (loop), measured ahead of the grouped AVX-512 FMA
  // kernel at every group size tried (quiet machine, 1 thread, C 512, E 64 of width 256:
  // 5-10 % at 128 rows a group, 7 % at 512; through the llama MoE layer 0.85x the dense MLP
  // against 0.78x; docs/kernels.md). The kernel's FMA loop runs at the same rate; sgemm
  // hides its packing better. bf16: the grouped kernels, 1.3-1.5x the per-group loop, whose
  // bf16 matmul primitive is made per row count.
  static const GroupedGemmPath chosen[2] = {
      GroupedGemmPath::loop, [] {
        for (const GroupedGemmPath p :
             {GroupedGemmPath::amx, GroupedGemmPath::avx512_bf16, GroupedGemmPath::loop})
          if (grouped_gemm_path_available(true, p)) return p;
        return GroupedGemmPath::portable;
      }()};
  return chosen[bf16];
}

GroupedGemmPath grouped_gemm_path(bool bf16) {
  const int over = path_override[bf16].load(std::memory_order_relaxed);
  return over < 0 ? grouped_gemm_default_path(bf16) : GroupedGemmPath(over);
}

std::string grouped_gemm_isa(bool bf16) {
  switch (grouped_gemm_path(bf16)) {
    case GroupedGemmPath::portable:
      return "portable";
    case GroupedGemmPath::loop:
      return bf16 ? "loop:" + matmul_bf16_isa() : "loop:sgemm";
    case GroupedGemmPath::avx512:
      return "avx512";
    case GroupedGemmPath::avx512_bf16:
      return "avx512-bf16";
    case GroupedGemmPath::amx:
      return "amx";
  }
  return "unknown";
}

ScopedGroupedGemmPath::ScopedGroupedGemmPath(bool bf16, GroupedGemmPath path)
    : bf16_(bf16), saved_(path_override[bf16].load()) {
  MT_CHECK(grouped_gemm_path_available(bf16, path), "the grouped GEMM path ", int(path),
           " is not available for ", bf16 ? "bf16" : "fp32", " on this CPU");
  path_override[bf16] = int(path);
}

ScopedGroupedGemmPath::~ScopedGroupedGemmPath() {
  path_override[bf16_] = saved_;
}

}  // namespace mt
