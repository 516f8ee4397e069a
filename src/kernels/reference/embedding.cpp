#include <cstddef>

#include "kernels/reference/reference.h"

namespace mt::ref {

void embedding_forward(float* out, const int* idx, const float* wte, const float* wpe, int B, int T,
                       int C, int64_t vocab_start, int vocab_rows) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const int64_t row = idx[b * T + t] - vocab_start;
      bool local = row >= 0 && row < vocab_rows;
      for (int c = 0; c < C; c++) {
        float tok = local ? wte[static_cast<size_t>(row) * C + c] : 0.0f;
        float pos = wpe ? wpe[static_cast<size_t>(t) * C + c] : 0.0f;
        out[(static_cast<size_t>(b) * T + t) * C + c] = tok + pos;
      }
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* idx, int B, int T,
                        int C, int64_t vocab_start, int vocab_rows) {
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
      const int64_t row = idx[b * T + t] - vocab_start;
      for (int c = 0; c < C; c++) {
        if (row >= 0 && row < vocab_rows) dwte[static_cast<size_t>(row) * C + c] += d[c];
        if (dwpe) dwpe[static_cast<size_t>(t) * C + c] += d[c];
      }
    }
  }
}

}  // namespace mt::ref
