// Where a training step's time goes, by kind of work: each kernel entry point opens a
// PhaseScope naming its phase and the FLOPs and bytes it moves, and a rank that profiles
// (`meshtrain bench step --breakdown`) attaches a PhaseTotals to its thread. Unattached,
// a scope costs one thread-local load.
//
// Only the outermost scope counts: a kernel that calls another (attention's GEMMs, a
// fused epilogue) is charged to the phase the caller names, so phases never overlap and
// their sum is the time spent in kernels; the rest of the step is framework and waiting.
#pragma once

#include <array>
#include <cstdint>

namespace mt {

enum class Phase : uint8_t {
  gemm,         // linear layers (fp32 sgemm, bf16 GEMM, their bias epilogues)
  attention,    // the attention core (scores, softmax, weighted sum; its GEMMs included)
  norm,         // LayerNorm, RMSNorm, the GPT block's residual adds
  activation,   // GELU, SwiGLU, RoPE
  optimizer,    // AdamW over the parameters
  conversion,   // fp32 <-> bf16 copies and rounding, layout transposes
  embedding,    // token/position tables and the cross-entropy head's softmax
  permutation,  // MoE token rows to and from expert order (gather, combine, scatter, regroup)
  count
};
constexpr int kPhases = int(Phase::count);
const char* phase_name(Phase p);

struct PhaseTotals {
  // seconds: wall time; cpu_seconds: the profiling thread's CPU time in the same scopes
  // (core/timer.h thread_cpu_seconds), which a loaded machine does not inflate.
  std::array<double, kPhases> seconds{}, cpu_seconds{}, flops{}, bytes{};
  std::array<uint64_t, kPhases> calls{};
};

// The totals the calling thread adds to (nullptr: not profiling). Per thread: ranks are
// threads, each profiles its own kernels.
PhaseTotals* attached_phase_totals();
void attach_phase_totals(PhaseTotals* totals);

class PhaseScope {
 public:
  PhaseScope(Phase p, double flops, double bytes);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseTotals* totals_;  // null when not profiling or nested
  Phase phase_;
  double begin_ = 0, begin_cpu_ = 0;
};

}  // namespace mt
