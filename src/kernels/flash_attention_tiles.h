// The products of flash attention as one table of functions per (instruction set, precision,
// head dim), so the drivers (flash_attention_forward.cpp, flash_attention_backward.cpp) hold
// the blocking, masking and softmax once and every path plugs in its micro-kernels.
//
// Operand layouts ("floats" count 32-bit slots; a bf16 pair fills one):
//   rows       a scores operand's rows (q, dout): row_floats slots per row (fp32: hd floats;
//              bf16: hd / 2 pairs of consecutive dims)
//   key block  kFlashKeyBlock rows (k, v) transposed for the scores' vector side:
//              kFlashKeyBlock * row_floats slots (fp32: (hd, 32); bf16: (hd / 2, 32) pairs)
//   reduction  an operand whose rows are the reduction index of a rows-times-matrix product
//              (v and k along keys, q and dout along queries): row_floats slots per row (fp32:
//              the rows; bf16: rows 2i and 2i + 1 interleaved, element by element, as hd pairs)
// Rows past the valid ones are zero in every packed operand, so tail blocks need no care
// beyond the zero probabilities the drivers write there.
#pragma once

#include <cstddef>
#include <type_traits>

#include "kernels/flash_attention.h"
#include "kernels/rope.h"

namespace mt::flash {

// A run of rows of a strided operand (q, k, v or dout rows of one sequence), every head of
// each row, packed per head: reading the rows in order lets the hardware prefetch them
// (the rows of a fused qkv output lie pages apart).
struct PackRows {
  float* dst;  // head h's operand at dst + h * head_stride, run row r at r * row_floats
  size_t head_stride;
  const float* src;  // run row r at src + r * ld, head h at column h * hd
  size_t ld;
  int rows, padded;  // rows read; rows written (zeros past `rows`)
  int heads, hd;
  const int* pos;         // positions of the run's rows
  const RopeTable* rope;  // null: not rotated
};

struct Tiles {
  const char* name;
  bool pairs;              // bf16 pairs: row_floats = hd / 2 (else hd)
  bool reduction_is_rows;  // the reduction layout equals the rows layout (fp32): pack once

  // The three layouts above; key blocks need `padded` a multiple of kFlashKeyBlock and the
  // reduction layout an even `padded`.
  void (*pack_rows)(const PackRows& p);
  void (*pack_key_blocks)(const PackRows& p);
  void (*pack_reduction)(const PackRows& p);
  // s (rows, kFlashKeyBlock), row stride kFlashKeyBlock, = alpha * x . block^T; rows <=
  // kFlashQueryBlock.
  void (*scores)(float* s, const float* x, int rows, const float* block, float alpha, int hd);
  // c (rows, hd), row stride ldc, += a (rows, kFlashKeyBlock) . r (kFlashKeyBlock rows of a
  // reduction operand along keys).
  void (*rows_by_keys)(float* c, size_t ldc, const float* a, int rows, const float* r, int hd);
  // c (kFlashKeyBlock, hd) += a^T . r, a (qrows, kFlashKeyBlock), r the reduction operand of
  // the same qrows query rows (padded even).
  void (*keys_by_rows)(float* c, const float* a, int qrows, const float* r, int hd);
  // Called by each thread around a task's products (the AMX tables load and release the
  // tile configuration there); null: nothing to do.
  void (*enter)() = nullptr;
  void (*leave)() = nullptr;
};

// A thread's tasks between enter and leave (the rest of its parallel region).
class TileScope {
 public:
  explicit TileScope(const Tiles& t) : t_(t) {
    if (t_.enter) t_.enter();
  }
  ~TileScope() {
    if (t_.leave) t_.leave();
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;

 private:
  const Tiles& t_;
};

inline int row_floats(const Tiles& t, int hd) {
  return t.pairs ? hd / 2 : hd;
}

// The table for this head dim, or null where this build / CPU has none.
const Tiles* tiles_avx512_fp32(int hd);
const Tiles* tiles_avx512_bf16(int hd);
const Tiles* tiles_amx_bf16(int hd);  // also null where Linux refuses the tile state
const Tiles& tiles_portable();

// Portable fp32 packers (the AVX-512 fp32 table shares the layouts).
void pack_rows_fp32(const PackRows& p);
void pack_key_blocks_fp32(const PackRows& p);

// One head vector of src rotated to position pos (when rope) into dst (hd floats).
inline void rotated_copy(float* dst, const float* src, int pos, const RopeTable* rope, int hd) {
  for (int d = 0; d < hd; d++) dst[d] = src[d];
  if (rope) rope_rotate(dst, rope->cos(pos), rope->sin(pos), hd / 2);
}

constexpr size_t round_up(size_t x, size_t m) {
  return (x + m - 1) / m * m;
}

// One sequence's packed q (every query head) and K (every kv head), as the forward packs them
// into its scratch or into FlashAttention::packed (one sequence after another), where the
// backward finds them.
struct PackedQK {
  size_t q_head = 0;  // one query head's rows
  size_t k_head = 0;  // one kv head's key blocks
  size_t sequence = 0;
};

inline PackedQK packed_qk(const FlashAttention& a, const Tiles& t) {
  const size_t rf = row_floats(t, a.hd), nkb = (a.Tk + kFlashKeyBlock - 1) / kFlashKeyBlock;
  PackedQK p;
  p.q_head = round_up(size_t(a.Tq) * rf, 16);
  p.k_head = round_up(nkb * kFlashKeyBlock * rf, 16);
  p.sequence = size_t(a.H) * p.q_head + size_t(a.Hkv) * p.k_head;
  return p;
}

// Query rows per register tile of the row-side products at head size HD, in both the fp32
// and the bf16 kernels: rows x HD/16 accumulators stay at or under 24 of the 32 vector
// registers, leaving the rest for the operands.
template <int HD>
constexpr int rows_per_tile() {
  return HD <= 32 ? 8 : HD == 64 ? 6 : 3;
}

// The head dims the tables are built for, in one place for every table: table_of(HD) with HD
// a std::integral_constant of the head dim asked (16, 32, 64 or 128), nullptr for another.
// A table that cannot take one of them returns nullptr for it.
template <class TableOf>
const Tiles* tiles_for_head_dim(int hd, TableOf table_of) {
  switch (hd) {
    case 16:
      return table_of(std::integral_constant<int, 16>{});
    case 32:
      return table_of(std::integral_constant<int, 32>{});
    case 64:
      return table_of(std::integral_constant<int, 64>{});
    case 128:
      return table_of(std::integral_constant<int, 128>{});
  }
  return nullptr;
}

// The kernels a call runs (flash_attention.cpp).
const Tiles& select_tiles(const FlashAttention& a);

// Slots of scratch the drivers use, by the same arithmetic in sizing and in the call.
size_t forward_scratch_floats(const FlashAttention& a, const Tiles& t, int workers);
size_t backward_scratch_floats(const FlashAttention& a, const Tiles& t, int workers);
void forward(float* out, size_t ldo, float* lse, const FlashAttention& a, bool accumulate,
             float* scratch, const Tiles& t);
void forward(bf16* out, size_t ldo, float* lse, const FlashAttention& a, float* scratch,
             const Tiles& t);
void backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse, const float* D,
              const FlashAttention& a, float* scratch, const Tiles& t);
void backward(const FlashGradsBf16& g, const float* dout, size_t lddo, const float* lse,
              const float* D, const FlashAttention& a, float* scratch, const Tiles& t);

}  // namespace mt::flash
