// Byte-level tokenizer: token id = byte value, vocabulary 256. It needs no vocabulary
// file, round-trips any byte string (UTF-8 or not) exactly, and is what the default
// corpus and `meshtrain sample` use. GPT-2-tokenized shards bring their own ids; the
// byte tokenizer cannot decode those (ids above 255).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace mt {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;

  static std::vector<int> encode(std::string_view text);
  // Returns the raw bytes; throws UsageError for an id outside 0..255.
  static std::string decode(std::span<const int> tokens);
  static std::string decode_token(int token) { return decode(std::span<const int>(&token, 1)); }
};

// The tokenizer travels with the weights: exports and checkpoints carry its record as the
// safetensors metadata entry "tokenizer" (its JSON: kind, file, crc32c).
std::map<std::string, std::string> tokenizer_metadata(const std::optional<TokenizerRecord>& r);
// The record a weights file carries; nullopt for a file written without one (before
// tokenizers were recorded, or by another tool). Throws UsageError for a malformed one.
std::optional<TokenizerRecord> weights_tokenizer(const std::string& weights_path);
// The same from metadata entries already read (a sharded checkpoint's manifest); `where`
// names their file in errors.
std::optional<TokenizerRecord> metadata_tokenizer(const std::map<std::string, std::string>& meta,
                                                  const std::string& where);

// The tokenizer to turn a model's ids into text: the record's when there is one, else the
// byte tokenizer for a vocabulary of at most 256; null when nothing can decode (ids of a
// tokenizer meshtrain does not know, e.g. GPT-2 shards). Throws UsageError when the
// record's file is missing or changed.
std::unique_ptr<Tokenizer> tokenizer_for(const std::optional<TokenizerRecord>& r, int vocab);

}  // namespace mt
