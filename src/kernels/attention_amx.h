// --precision bf16's attention core for one (batch, head) on AMX tiles (picked at run time by
// attention.cpp where the CPU has AMX and Linux grants the tile state; else the AVX512-BF16
// register kernel, attention_bf16_avx512.h). The same contract as that kernel: the six
// products take bf16 operands (rounded to nearest even by the CPU's conversion) and
// accumulate in fp32; the scores, the softmax and its backward stay fp32, and att receives
// the fp32 probabilities with exact zeros above the diagonal.
//
// Every product is TDPBF16PS on 32 x 32 blocks (four 16 x 16 fp32 accumulator tiles, two A
// and two B tiles). Query rows go 32 at a time: their scores against the visible keys
// (32 x T fp32, in L1 for the GPT shapes) leave the tiles once, are turned into
// probabilities (forward) or dS = P * (dP - rowsum(P dP)) * scale (backward), rounded to bf16
// and fed straight back to the tiles (P V, dS K). The key-side products are computed
// transposed, dK^T = Q^T dS and dV^T = dout^T P, so their reduction over query rows reads
// two consecutive rows of dS / P as bf16 pairs (built as each row block is formed), never a
// (T, T) transpose; only the (hd, T) results are transposed as they are stored.
#pragma once

#include "kernels/attention_avx512.h"
#include "kernels/bf16.h"

namespace mt {

// True when this build, this CPU and this process (ARCH_REQ_XCOMP_PERM granted) run these
// kernels for this head dim (32, 64 or 128: whole 32-wide tile steps).
bool attention_amx_supports(int hd);
// Bytes of the per-thread buffers these kernels keep for heads of length T and head dim hd
// (32, 64 or 128; 0 for others): what the forward and the backward grow them to (they are
// never freed). Arithmetic only, on any CPU, so the memory estimate can be checked anywhere.
size_t attention_amx_scratch_bytes(int T, int hd);

// out (T, hd), row stride ldo, overwritten (bf16: rounded as to_bf16 rounds).
void attention_head_forward_amx(const AttentionHead& h, float* out, int ldo, float* att);
void attention_head_forward_amx(const AttentionHead& h, bf16* out, int ldo, float* att);

// dq, dk, dv (T, hd), row stride ldd, from dout (T, hd) and the forward's att (T, T):
// accumulate true adds to them, false overwrites them (bf16: always overwritten). Any T:
// every gradient row is written once.
void attention_head_backward_amx(const AttentionHead& h, float* dq, float* dk, float* dv, int ldd,
                                 const float* dout, int lddo, const float* att, bool accumulate);
void attention_head_backward_amx(const AttentionHead& h, bf16* dq, bf16* dk, bf16* dv, int ldd,
                                 const float* dout, int lddo, const float* att);

}  // namespace mt
