#include "train/tokenizer.h"

#include "core/error.h"

namespace mt {

std::vector<int> ByteTokenizer::encode(std::string_view text) {
  std::vector<int> tokens(text.size());
  // Through unsigned char: bytes >= 0x80 must become 128..255, not negative ids.
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const int> tokens) {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    int t = tokens[i];
    MT_REQUIRE(t >= 0 && t < kVocabSize, "token id ", t, " at position ", i,
               " is not a byte; the byte tokenizer decodes ids 0..255 only");
    text[i] = static_cast<char>(static_cast<unsigned char>(t));
  }
  return text;
}

}  // namespace mt
