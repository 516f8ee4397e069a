// Byte-level tokenizer: token id = byte value, vocabulary 256. It needs no vocabulary
// file, round-trips any byte string (UTF-8 or not) exactly, and is what the default
// corpus and `meshtrain sample` use. GPT-2-tokenized shards bring their own ids; the
// byte tokenizer cannot decode those (ids above 255).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;

  static std::vector<int> encode(std::string_view text);
  // Returns the raw bytes; throws UsageError for an id outside 0..255.
  static std::string decode(std::span<const int> tokens);
  static std::string decode_token(int token) { return decode(std::span<const int>(&token, 1)); }
};

}  // namespace mt
