// Flash-style causal attention (online softmax, no (Tq, Tk) buffer): the Llama block's core
// (grouped-query attention, RoPE fused) and one ring step of context parallelism.
//
//   algorithm  FlashAttention-2 on the CPU. Forward: per task (sequence b, query head h,
//              block of kFlashQueryBlock query rows) the rows' scores against one block of
//              kFlashKeyBlock keys at a time, a running max m and sum l per row, the output
//              accumulator rescaled by exp(m_old - m_new) as m grows; out = acc / l and
//              lse = m + log(l) at the end. Backward recomputes P = exp(S - lse) blockwise from
//              the final lse and D = rowsum(dout * out): dS = P * (dP - D) * scale.
//   GQA        query head h reads kv head h / (H / Hkv). Each kv head's K and V are packed once
//              per call (rotated, into the products' layouts) and read by all its query heads;
//              nothing grows with H but the query side.
//   masking    by positions: key j is visible to query i iff kpos[j] <= qpos[i]. A key block is
//              skipped when its smallest kpos exceeds the query block's largest qpos, runs
//              unmasked when its largest kpos is <= the smallest qpos, and is masked per element
//              otherwise: this covers one worker (both 0..T-1) and every zigzag ring step.
//   threads    per sequence b: pack, then tasks fixed by the shape, never by the thread
//              count (forward: query block x query head; backward: kv head x key chunk), each
//              writing only rows it owns, so 1 and 2 threads give the same bits. Backward
//              splits a kv head's key blocks into C chunks (round robin; C > 1 only when Hkv <
//              4) with one dq partial each, summed in order. Even B = 1, Hkv = 1 has tasks.
//   memory     O(T): caller scratch of one sequence's packed q (and dout), K, V, the C dq
//              partials and per-thread tiles; never a (Tq, Tk) buffer. With a.packed the
//              forward's packed q and K of every sequence are kept (the caller's buffer) and
//              the backward reads them: it packs only dout, V and the reduction layouts. The
//              same packers on the same rows, so the bits are those of packing again.
//   merge      accumulate: (out, lse) already hold a softmax over other keys; the new block's
//              (o, l) is merged in fp32 with log-sum-exp weights. lse = -inf marks "no key seen"
//              (out 0), which a merge ignores: a ring step's fully masked rows are harmless.
//   dropout    (a.dropout.p > 0, --dropout while training) on the probabilities, as nanoGPT's
//              attn_dropout: the P that multiplies V is P * m / (1 - p), with the online
//              softmax's running sum l (hence lse) over the undropped P. The mask m of (query
//              row i, query head h, key j) is kernels/dropout.h's of token row_tokens[b * Tq + i],
//              feature (head_offset + h) * seq_len + kpos[j]: a pure function of the query's
//              global token, the head and the key's true position, so every key block, ring
//              step, tp split of the heads, precision and tile path draws the same mask. The
//              backward redraws it from the counters (dV += (P m)^T dout, dS = P (dP m - D)
//              with D = rowsum(dout * out) unchanged); nothing is stored.
//   precision  fp32, or bf16 operands with fp32 accumulation for QK^T, PV and the
//              backward's four products (AMX tiles at head dims 32/64/128 where the CPU has
//              AMX and Linux grants the tile state, else AVX512-BF16 dot products; the same
//              bf16 operands either way); scores, softmax, lse and merges fp32.
#pragma once

#include <cstddef>
#include <span>

#include "kernels/bf16.h"
#include "kernels/dropout.h"
#include "kernels/rope.h"

namespace mt {

enum class FlashPrecision { fp32, bf16 };

constexpr int kFlashKeyBlock = 32;    // keys per block (two 16-lane vectors of scores)
constexpr int kFlashQueryBlock = 64;  // query rows per task
constexpr int kFlashMaxHeadDim = 512;

// Dropout on the probabilities (see "dropout" above); p = 0: none.
struct FlashDropout {
  DropoutKey key;
  float p = 0;
  const int64_t* row_tokens = nullptr;  // (B * Tq): the global token of each query row
  int head_offset = 0;                  // the global index of query head 0 (tensor parallelism)
  int64_t seq_len = 0;                  // the whole sequence's length: the heads' feature stride
  bool on() const { return p > 0; }
};

// One call's operands. Rows are (b * Tq + t) for q and (b * Tk + t) for k, v; head h of a row
// starts at column h * hd. q, k, v may live in one fused [q | k | v] GEMM output (strides).
struct FlashAttention {
  int B = 1, Tq = 0, Tk = 0;  // sequences, query rows and key rows per sequence
  int H = 1, Hkv = 1, hd = 0;
  const float* q = nullptr;  // (B * Tq, ldq), H * hd used, NOT rotated
  const float* k = nullptr;  // (B * Tk, ldk), Hkv * hd used, NOT rotated
  const float* v = nullptr;  // (B * Tk, ldv), Hkv * hd used
  size_t ldq = 0, ldk = 0, ldv = 0;
  const int* qpos = nullptr;  // Tq true positions (0 .. Tq-1 for one worker), the same for every b
  const int* kpos = nullptr;  // Tk true positions
  const RopeTable* rope = nullptr;  // null: no RoPE (the GPT block)
  FlashPrecision precision = FlashPrecision::fp32;
  FlashDropout dropout;   // while training with --dropout
  bool portable = false;  // force the portable loops (tests and benchmarks compare the paths)
  bool amx = true;        // false: the AVX512-BF16 tiles even where AMX runs (the fallback)
  // One worker (never a ring step): flash_attention_packed_floats(a) slots where the forward
  // packs q (rotated) and K (rotated) of every sequence, kept for the backward of the same
  // operands, which reads them there instead of packing them again. Null: packed per call.
  float* packed = nullptr;
};

// Scratch for one call at the calling thread's omp_get_max_threads().
size_t flash_attention_forward_scratch_floats(const FlashAttention& a);
size_t flash_attention_backward_scratch_floats(const FlashAttention& a);
// The same for a team of `workers` threads on any CPU: the portable tiles' layouts, which the
// fp32 AVX-512 tiles share and which the bf16 tiles' pairs halve on the key side (their row
// side the same up to the rounding to 16 floats), whatever tiles this CPU would pick. A local
// plan counts this for its profile's ranks (model/kernel_target.h).
size_t flash_attention_forward_scratch_floats(const FlashAttention& a, int workers);
size_t flash_attention_backward_scratch_floats(const FlashAttention& a, int workers);
// The kept packing of a.packed: per sequence, q of every query head and K of every kv head in
// the products' layouts (bf16 tiles: a bf16 copy of q and k; fp32: an fp32 copy). any_cpu:
// the portable tiles' layout, the widest, whatever tiles this CPU picks (a local plan's count).
size_t flash_attention_packed_floats(const FlashAttention& a, bool any_cpu = false);

// out (B * Tq rows, stride ldo; H * hd), lse (B, H, Tq) of the scaled scores.
// accumulate false: overwritten (rows without a visible key: out 0, lse -inf).
// accumulate true: merged into the (out, lse) they hold, so calls on key blocks [0, a) and
// [a, Tk) equal one call on [0, Tk) up to rounding.
void flash_attention_forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
                             bool accumulate, std::span<float> scratch);

// D (B, H, Tq) = rowsum(dout * out) per head: once per layer, whatever the key blocks.
void flash_attention_backward_prep(float* D, const float* out, size_t ldo, const float* dout,
                                   size_t lddo, int B, int Tq, int H, int hd);
// The same from the output kept in bf16 (--precision bf16), read as it is: bit for bit the
// fp32 form on from_bf16(out), without that (B * Tq, H hd) fp32 copy.
void flash_attention_backward_prep(float* D, const bf16* out, size_t ldo, const float* dout,
                                   size_t lddo, int B, int Tq, int H, int hd);

// Gradients in q, k, v's layouts (rows and strides as they are), accumulated (+=).
// overwrite (a whole call on one worker, not a ring step, whose steps add up): each row is
// stored as 0 + its gradient, bitwise the sum onto zeroed gradients without the caller's
// memset (the call puts every row of dq, dk and dv exactly once).
struct FlashGrads {
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
  size_t lddq = 0, lddk = 0, lddv = 0;
  bool overwrite = false;
};

// dq, dk, dv += the gradient of the keys in `a` (all of them, or a ring step's visiting
// block) from dout (B * Tq rows, stride lddo) and the FINAL merged lse and D of the rows.
// GQA sums a group's query heads into its kv head; with RoPE dq, dk leave un-rotated.
void flash_attention_backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse,
                              const float* D, const FlashAttention& a, std::span<float> scratch);

// --precision bf16 on one worker (not a ring step, which merges): the output and the
// gradients written as bf16 where they are kept, bit for bit to_bf16 of the fp32 forms (the
// forward's overwrite; the backward's sum onto zeroed gradients), without an fp32 copy
// written, zeroed or converted. The backward overwrites every row of dq, dk and dv.
struct FlashGradsBf16 {
  bf16* dq = nullptr;
  bf16* dk = nullptr;
  bf16* dv = nullptr;
  size_t lddq = 0, lddk = 0, lddv = 0;
};
void flash_attention_forward(bf16* out, size_t ldo, float* lse, const FlashAttention& a,
                             std::span<float> scratch);
void flash_attention_backward(const FlashGradsBf16& g, const float* dout, size_t lddo,
                              const float* lse, const float* D, const FlashAttention& a,
                              std::span<float> scratch);

// Which kernels a call with these operands runs: "amx-bf16", "avx512-fp32", "avx512-bf16" or
// "portable"
// (any even head dim; also bf16 requests where the CPU or head dim has no AVX512-BF16 path,
// which then run in fp32).
const char* flash_attention_path(const FlashAttention& a);

}  // namespace mt
