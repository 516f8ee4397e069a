// UTF-8 scanning for the tokenizers: SentencePiece only sees valid UTF-8 (it would turn
// bad bytes into U+FFFD), so text is cut into runs it can take and bytes it cannot.
#pragma once

#include <cstddef>
#include <string_view>

namespace mt {

// Length of the valid UTF-8 sequence starting at s[i] (1..4), or 0 when s[i] does not
// start one (stray continuation byte, overlong form, surrogate, > U+10FFFF, truncated).
size_t utf8_sequence_length(std::string_view s, size_t i);

// Length of the longest prefix of s[i..] that SentencePiece may see: valid UTF-8 holding
// neither U+2581 (SentencePiece's own space marker, which decodes as ' ') nor U+0000.
size_t sentencepiece_safe_run(std::string_view s, size_t i);

}  // namespace mt
