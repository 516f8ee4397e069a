// Flash attention's entry points: operand checks (before any parallel region: an exception
// must not leave one), the choice of kernels, scratch sizes, and D = rowsum(dout * out).
#include "kernels/flash_attention.h"
#include "kernels/phase_profile.h"

#include <omp.h>

#include "core/error.h"
#include "kernels/flash_attention_tiles.h"

namespace mt {
namespace {

void check_positions(const int* pos, int n, const RopeTable* rope, const char* what) {
  MT_CHECK(n == 0 || pos, "flash attention: ", what, " positions missing");
  for (int i = 0; i < n; i++) {
    MT_CHECK(pos[i] >= 0, "flash attention: ", what, " position ", pos[i], " is negative");
    MT_CHECK(!rope || pos[i] < rope->positions(), "flash attention: ", what, " position ", pos[i],
             " outside the RoPE table of ", rope->positions());
  }
}

void check_operands(const FlashAttention& a) {
  MT_CHECK(a.B >= 0 && a.Tq >= 0 && a.Tk >= 0, "flash attention: negative shape");
  MT_CHECK(a.H > 0 && a.Hkv > 0 && a.H % a.Hkv == 0, "flash attention: ", a.H,
           " query heads are not groups of ", a.Hkv, " kv heads");
  MT_CHECK(a.hd > 0 && a.hd % 2 == 0 && a.hd <= kFlashMaxHeadDim, "flash attention: head dim ",
           a.hd, " is not even or exceeds ", kFlashMaxHeadDim);
  MT_CHECK(
      a.ldq >= size_t(a.H) * a.hd && a.ldk >= size_t(a.Hkv) * a.hd && a.ldv >= size_t(a.Hkv) * a.hd,
      "flash attention: a row stride is narrower than its heads");
  MT_CHECK(!a.rope || a.rope->half() * 2 == a.hd, "flash attention: RoPE table for head dim ",
           a.rope ? a.rope->half() * 2 : 0, ", not ", a.hd);
  check_positions(a.qpos, a.Tq, a.rope, "query");
  check_positions(a.kpos, a.Tk, a.rope, "key");
  if (!a.dropout.on()) return;
  MT_CHECK(a.dropout.p < 1 && a.dropout.row_tokens, "flash attention: dropout ", a.dropout.p,
           " without the rows' tokens");
  for (int j = 0; j < a.Tk; j++)
    MT_CHECK(a.kpos[j] < a.dropout.seq_len, "flash attention: key position ", a.kpos[j],
             " outside the dropout's sequence of ", a.dropout.seq_len);
}

void check_scratch(std::span<float> scratch, size_t need) {
  MT_CHECK(scratch.size() >= need, "flash attention: scratch of ", scratch.size(),
           " floats, the call needs ", need, " (sized at another thread count?)");
}

}  // namespace

namespace flash {

const Tiles& select_tiles(const FlashAttention& a) {
  if (a.portable) return tiles_portable();
  if (a.precision == FlashPrecision::bf16) {
    if (a.amx)
      if (const Tiles* t = tiles_amx_bf16(a.hd)) return *t;
    if (const Tiles* t = tiles_avx512_bf16(a.hd)) return *t;
  }
  if (const Tiles* t = tiles_avx512_fp32(a.hd)) return *t;
  return tiles_portable();
}

}  // namespace flash

const char* flash_attention_path(const FlashAttention& a) {
  return flash::select_tiles(a).name;
}

size_t flash_attention_forward_scratch_floats(const FlashAttention& a) {
  return flash::forward_scratch_floats(a, flash::select_tiles(a), omp_get_max_threads());
}

size_t flash_attention_backward_scratch_floats(const FlashAttention& a) {
  return flash::backward_scratch_floats(a, flash::select_tiles(a), omp_get_max_threads());
}

size_t flash_attention_forward_scratch_floats(const FlashAttention& a, int workers) {
  return flash::forward_scratch_floats(a, flash::tiles_portable(), workers);
}

size_t flash_attention_backward_scratch_floats(const FlashAttention& a, int workers) {
  return flash::backward_scratch_floats(a, flash::tiles_portable(), workers);
}

size_t flash_attention_packed_floats(const FlashAttention& a, bool any_cpu) {
  const flash::Tiles& t = any_cpu ? flash::tiles_portable() : flash::select_tiles(a);
  return size_t(a.B) * flash::packed_qk(a, t).sequence;
}

namespace {

// The forward's phase and checks around the kernel (`run` with the tiles chosen), for the
// fp32 and the bf16 output forms.
template <class Run>
void forward_call(size_t ldo, const FlashAttention& a, std::span<float> scratch, Run&& run) {
  PhaseScope phase_scope(Phase::attention, 2.0 * a.B * a.H * a.Tq * a.Tk * a.hd,
                         8.0 * a.B * (double(a.Tq) * a.H + double(a.Tk) * a.Hkv) * a.hd);
  check_operands(a);
  MT_CHECK(ldo >= size_t(a.H) * a.hd, "flash attention: out stride ", ldo);
  const flash::Tiles& t = flash::select_tiles(a);
  check_scratch(scratch, flash::forward_scratch_floats(a, t, omp_get_max_threads()));
  run(t);
}

}  // namespace

void flash_attention_forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
                             bool accumulate, std::span<float> scratch) {
  forward_call(ldo, a, scratch, [&](const flash::Tiles& t) {
    flash::forward(out, ldo, lse, a, accumulate, scratch.data(), t);
  });
}

void flash_attention_forward(bf16* out, size_t ldo, float* lse, const FlashAttention& a,
                             std::span<float> scratch) {
  forward_call(ldo, a, scratch,
               [&](const flash::Tiles& t) { flash::forward(out, ldo, lse, a, scratch.data(), t); });
}

namespace {

// One head's sum(o * dy) over hd values. One loop for both output types, so the bf16 form
// (its row converted first) sums in the fp32 form's order, bit for bit.
[[gnu::noinline]] float head_dot(const float* o, const float* dy, int hd) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int d = 0; d < hd; d++) sum += o[d] * dy[d];
  return sum;
}

const float* as_floats(const float* o, int, float*) {
  return o;
}
const float* as_floats(const bf16* o, int hd, float* row) {
  for (int d = 0; d < hd; d++) row[d] = bf16_to_float(o[d]);
  return row;
}

template <class OutT>
void backward_prep(float* D, const OutT* out, size_t ldo, const float* dout, size_t lddo, int B,
                   int Tq, int H, int hd) {
  PhaseScope phase_scope(Phase::attention, 0, (4.0 + sizeof(OutT)) * B * Tq * H * hd);
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tq; bt++) {
    const int b = bt / Tq, t = bt % Tq;
    float row[kFlashMaxHeadDim];
    for (int h = 0; h < H; h++) {
      const float* o = as_floats(out + size_t(bt) * ldo + size_t(h) * hd, hd, row);
      D[(size_t(b) * H + h) * Tq + t] = head_dot(o, dout + size_t(bt) * lddo + size_t(h) * hd, hd);
    }
  }
}

}  // namespace

void flash_attention_backward_prep(float* D, const float* out, size_t ldo, const float* dout,
                                   size_t lddo, int B, int Tq, int H, int hd) {
  backward_prep(D, out, ldo, dout, lddo, B, Tq, H, hd);
}

void flash_attention_backward_prep(float* D, const bf16* out, size_t ldo, const float* dout,
                                   size_t lddo, int B, int Tq, int H, int hd) {
  backward_prep(D, out, ldo, dout, lddo, B, Tq, H, hd);
}

namespace {

template <class Grads>
void backward_call(const Grads& g, const float* dout, size_t lddo, const float* lse, const float* D,
                   const FlashAttention& a, std::span<float> scratch) {
  PhaseScope phase_scope(Phase::attention, 5.0 * a.B * a.H * a.Tq * a.Tk * a.hd,
                         16.0 * a.B * (double(a.Tq) * a.H + double(a.Tk) * a.Hkv) * a.hd);
  check_operands(a);
  MT_CHECK(g.lddq >= size_t(a.H) * a.hd && g.lddk >= size_t(a.Hkv) * a.hd &&
               g.lddv >= size_t(a.Hkv) * a.hd && lddo >= size_t(a.H) * a.hd,
           "flash attention: a gradient's row stride is narrower than its heads");
  const flash::Tiles& t = flash::select_tiles(a);
  check_scratch(scratch, flash::backward_scratch_floats(a, t, omp_get_max_threads()));
  flash::backward(g, dout, lddo, lse, D, a, scratch.data(), t);
}

}  // namespace

void flash_attention_backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse,
                              const float* D, const FlashAttention& a, std::span<float> scratch) {
  backward_call(g, dout, lddo, lse, D, a, scratch);
}

void flash_attention_backward(const FlashGradsBf16& g, const float* dout, size_t lddo,
                              const float* lse, const float* D, const FlashAttention& a,
                              std::span<float> scratch) {
  backward_call(g, dout, lddo, lse, D, a, scratch);
}

}  // namespace mt
