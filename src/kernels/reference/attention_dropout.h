// The causal attention core with dropout on its probabilities (kernels/dropout.h's masks):
// out = (dropout(softmax(q k^T / sqrt(hd)))) v, as nanoGPT's attn_dropout. Element (query t,
// head h, key u) is kept by the mask of token row_tokens[b*T + t], feature
// (head_offset + h) * T + u, so a tensor-parallel rank (head_offset = its first global head)
// and any microbatch draw one worker's mask. att keeps the probabilities *before* dropout
// (the softmax backward needs them); the backward regenerates the mask from the counters.
// Portable loops over the (batch, head) pairs (OpenMP across pairs). The blocks now drop
// inside the flash core (flash_attention.h "dropout"); these (T, T) loops, which drew the
// gpt2 block's masks before, are the independent check that the flash core's mask is the same
// (tests/kernels/test_flash_attention_dropout.cpp); only tests use them, hence reference/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/dropout.h"

namespace mt {

struct AttentionDropout {
  DropoutKey key;
  float p = 0;
  const int64_t* row_tokens = nullptr;  // (B*T): the global token of each query row
  int head_offset = 0;                  // global index of this rank's head 0
};

// out (B, T, C), att (B, NH, T, T), qkv (B, T, 3C) as attention_forward.
void attention_dropout_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                               int NH, const AttentionDropout& d);

// dqkv (B, T, 3C) = the gradient (overwritten) from dout (B, T, C), with att from the forward.
void attention_dropout_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                int B, int T, int C, int NH, const AttentionDropout& d);

}  // namespace mt
