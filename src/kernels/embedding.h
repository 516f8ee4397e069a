// Token + position embedding. The token table may be a vocabulary shard (tensor
// parallelism): rows cover ids [vocab_start, vocab_start + vocab_rows); ids outside give 0
// and the shards' outputs are summed by the caller. One worker passes (0, V).
#pragma once

#include <cstdint>

namespace mt {

// out (B, T, C) = wte[idx - vocab_start] + wpe[pos[t]]   (wpe may be null: no position term).
// pos: the T rows' true positions (context parallelism's zigzag shard); null means 0..T-1.
void embedding_forward(float* out, const int* idx, const float* wte, const float* wpe, int B, int T,
                       int C, int64_t vocab_start, int vocab_rows, const int* pos = nullptr);

// dwte (vocab_rows, C) += scatter of dout by idx;  dwpe[pos[t]] += sum over B of dout (if
// non-null; pos as above).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx, int B, int T,
                        int C, int64_t vocab_start, int vocab_rows, const int* pos = nullptr);

}  // namespace mt
