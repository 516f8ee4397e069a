// Which tokenizer a model's weights go with: the record exports and checkpoints carry, and
// the tokenizer that turns the model's ids back into text. The tokenizers themselves are
// data/tokenizer.h's.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "data/tokenizer.h"

namespace mt {

// The tokenizer travels with the weights: exports and checkpoints carry its record as the
// safetensors metadata entry "tokenizer" (its JSON: kind, file, crc32c) and the model file
// itself, base64, as "tokenizer.model" (a SentencePiece model is 0.2-5 MB; up to
// kMaxEmbeddedTokenizerBytes), so weights moved to another machine still decode. A record
// without its bytes (larger, or from a weights file of an older meshtrain) names its file only.
inline constexpr size_t kMaxEmbeddedTokenizerBytes = 32u << 20;
std::map<std::string, std::string> tokenizer_metadata(const std::optional<TokenizerRecord>& r);
// The record a weights file carries; nullopt for a file written without one (before
// tokenizers were recorded, or by another tool). Throws UsageError for a malformed one. A
// Hugging Face directory's record is that of its tokenizer.model (train/hf_directory.h).
std::optional<TokenizerRecord> weights_tokenizer(const std::string& weights_path);
// The same from metadata entries already read (a sharded checkpoint's manifest); `where`
// names their file in errors. Embedded bytes that do not match the record's CRC-32C are a
// UsageError (a damaged header), not a silent fall back to the file.
std::optional<TokenizerRecord> metadata_tokenizer(const std::map<std::string, std::string>& meta,
                                                  const std::string& where);

// The tokenizer to turn a model's ids into text: the record's when there is one, else the
// byte tokenizer for a vocabulary of at most 256; null when nothing can decode (ids of a
// tokenizer meshtrain does not know, e.g. GPT-2 shards). Throws UsageError when the
// record's file is missing or changed.
std::unique_ptr<Tokenizer> tokenizer_for(const std::optional<TokenizerRecord>& r, int vocab);

}  // namespace mt
