// The context-parallel attention's own cost (calibration_probes.h): one cp rank's share of
// the ring (model/context_parallel_attention.cpp) run on one thread through the engine's
// flash kernel, against the whole sequence on one worker. A cp rank attends T / cp queries
// to T keys, 1 / cp of the FLOPs, but in cp calls on blocks of T / cp keys whose queries
// and keys are split in two zigzag chunks: smaller tiles, K/V packed and rotated once per
// call, the partial results merged, the K/V block packed (and under bf16 rounded, then
// widened at every step) and, backward, each step's dK/dV zeroed and summed. The factor is
// what that costs over 1 / cp of the one-worker call: cp x (the rank's time) / (the
// one-worker time). The hops themselves are priced apart (cost_model.h cp_exchange).
#include <algorithm>
#include <cstring>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/flash_attention.h"
#include "kernels/matmul_bf16.h"
#include "model/zigzag_layout.h"
#include "plan/calibration_probes.h"
#include "plan/calibration_timing.h"

namespace mt::plan {

namespace {

// The loop's model (bench/planner: 8 sequences of 128, 8 query heads of 32, 4 kv heads as
// the brute force's Llama block), the shape the attention probe times for cp 1.
constexpr int kB = 8, kT = 128, kH = 8, kHkv = 4, kHd = 32;

// One cp rank's operands: rank 0's zigzag rows of every sequence (the ranks are balanced by
// the zigzag), and every rank's positions for the visiting blocks' keys.
struct RankOperands {
  int cp, rows;
  std::vector<std::vector<int>> positions;
  std::vector<float> q, kv, out, lse, D, dout, dq, grads, incoming;
  std::vector<bf16> kv16;
  RopeTable rope{kHd, kT, 10000.0};
  FlashPrecision precision;

  RankOperands(int cp_size, FlashPrecision p) : cp(cp_size), rows(kT / cp_size), precision(p) {
    // cp 1: chunks 0 and 1 in order, the one worker's 0 .. T-1.
    for (int r = 0; r < cp; ++r) positions.push_back(zigzag_positions(kT, cp, r));
    const size_t n = size_t(kB) * rows, w = size_t(kHkv) * kHd;
    q.assign(n * kH * kHd, 0.01f);
    dout.assign(q.size(), 0.01f);
    dq.assign(q.size(), 0);
    out.assign(q.size(), 0);
    kv.assign(n * 2 * w, 0.02f);
    kv16.resize(kv.size());
    grads.assign(kv.size(), 0);
    incoming.assign(kv.size(), 0);
    lse.assign(size_t(kB) * kH * rows, 0);
    D.assign(lse.size(), 0);
  }
  // The call of ring step s: this rank's queries against rank `source`'s K/V block.
  FlashAttention step(int source) const {
    FlashAttention a;
    a.B = kB, a.Tq = a.Tk = rows, a.H = kH, a.Hkv = kHkv, a.hd = kHd;
    const size_t w = size_t(kHkv) * kHd;
    a.q = q.data(), a.k = kv.data(), a.v = kv.data() + w;
    a.ldq = size_t(kH) * kHd, a.ldk = a.ldv = 2 * w;
    a.qpos = positions[0].data(), a.kpos = positions[size_t(source)].data();
    a.rope = &rope, a.precision = precision;
    return a;
  }
  // The ring's copies of the block: packed (and under bf16 rounded) once, then under bf16
  // widened for the kernel at every step after the first.
  void pack() {
    std::vector<float>& packed = incoming;
    std::memcpy(packed.data(), kv.data(), kv.size() * sizeof(float));
    if (precision == FlashPrecision::bf16) to_bf16(kv16.data(), packed.data(), kv.size());
  }
  void widen(int s) {
    if (precision == FlashPrecision::bf16 && s > 0)
      from_bf16(incoming.data(), kv16.data(), kv.size());
  }
};

void rank_forward(RankOperands& o, std::span<float> scratch) {
  if (o.cp > 1) o.pack();
  for (int s = 0; s < o.cp; ++s) {
    o.widen(s);
    flash_attention_forward(o.out.data(), size_t(kH) * kHd, o.lse.data(), o.step((o.cp - s) % o.cp),
                            s > 0, scratch);
  }
}

void rank_backward(RankOperands& o, std::span<float> scratch) {
  if (o.cp > 1) o.pack();
  const size_t ld = 2 * size_t(kHkv) * kHd;
  for (int s = 0; s < o.cp; ++s) {
    o.widen(s);
    std::fill(o.grads.begin(), o.grads.end(), 0.0f);
    const FlashGrads g{o.dq.data(), o.grads.data(), o.grads.data() + ld / 2, size_t(kH) * kHd, ld,
                       ld};
    flash_attention_backward(g, o.dout.data(), size_t(kH) * kHd, o.lse.data(), o.D.data(),
                             o.step((o.cp - s) % o.cp), scratch);
    // The dK/dV sum that arrived is added to this step's share (the ring's add_inplace).
    if (s > 0)
      for (size_t i = 0; i < o.grads.size(); ++i) o.grads[i] += o.incoming[i];
  }
}

// Forward and backward seconds of one cp rank (cp 1: one worker), caches emptied before
// each call as the attention probe does.
std::pair<double, double> rank_seconds(int cp, FlashPrecision p, double seconds) {
  RankOperands o(cp, p);
  const FlashAttention a = o.step(0);
  std::vector<float> scratch(std::max(flash_attention_forward_scratch_floats(a),
                                      flash_attention_backward_scratch_floats(a)));
  rank_forward(o, scratch);
  flash_attention_backward_prep(o.D.data(), o.out.data(), size_t(kH) * kHd, o.dout.data(),
                                size_t(kH) * kHd, kB, o.rows, kH, kHd);
  const double fwd = best_time_cold(0.5 * seconds, [&] { rank_forward(o, scratch); });
  const double bwd = best_time_cold(0.5 * seconds, [&] { rank_backward(o, scratch); });
  return {fwd, bwd};
}

// cp x (the rank's forward + backward) over the one worker's, at cp 2 and 4.
std::pair<double, double> cp_factors(FlashPrecision p, double seconds) {
  const auto [f1, b1] = rank_seconds(1, p, seconds / 3);
  const auto [f2, b2] = rank_seconds(2, p, seconds / 3);
  const auto [f4, b4] = rank_seconds(4, p, seconds / 3);
  return {2 * (f2 + b2) / (f1 + b1), 4 * (f4 + b4) / (f1 + b1)};
}

}  // namespace

void measure_cp_attention(HardwareProfile& h, const ProbeRun& run) {
  const bool bf16 = bf16_matmul_supported();
  const double share = bf16 ? run.seconds / 2 : run.seconds;
  std::tie(h.cp2_attention_factor, h.cp4_attention_factor) =
      cp_factors(FlashPrecision::fp32, share);
  if (bf16)
    std::tie(h.cp2_attention_factor_bf16, h.cp4_attention_factor_bf16) =
        cp_factors(FlashPrecision::bf16, share);
}

}  // namespace mt::plan
