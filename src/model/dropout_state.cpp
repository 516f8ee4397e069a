#include "model/dropout_state.h"

namespace mt {

FlashDropout DropoutState::attention(int layer, int head_offset) const {
  if (!on()) return {};
  return {key(block_site(layer, 0)), p, row_tokens, head_offset, seq_len};
}

void DropoutState::rows(float* y, const float* x, uint32_t site, int Nl, int C, int first_row,
                        bool backward) const {
  const int64_t* tokens = row_tokens + first_row;
  if (backward)
    dropout_backward(y, x, Nl, C, tokens, 0, key(site), p);
  else
    dropout_forward(y, x, Nl, C, tokens, 0, key(site), p);
}

}  // namespace mt
