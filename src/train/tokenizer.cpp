#include "train/tokenizer.h"

#include "core/error.h"
#include "core/json_depth.h"
#include "train/safetensors.h"

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

std::map<std::string, std::string> tokenizer_metadata(const std::optional<TokenizerRecord>& r) {
  if (!r) return {};
  return {{"tokenizer", to_json(*r).dump()}};
}

std::optional<TokenizerRecord> weights_tokenizer(const std::string& weights_path) {
  SafetensorsFile f(weights_path);
  return metadata_tokenizer(f.metadata(), weights_path);
}

std::optional<TokenizerRecord> metadata_tokenizer(const std::map<std::string, std::string>& meta,
                                                  const std::string& where) {
  const auto it = meta.find("tokenizer");
  if (it == meta.end()) return std::nullopt;
  MT_REQUIRE(json_nesting_depth(it->second) <= kMaxJsonDepth, where,
             " has a malformed tokenizer record: it nests deeper than ", kMaxJsonDepth, " levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception&) {
    throw UsageError(str(where,
                         " has a malformed tokenizer record: its metadata entry "
                         "\"tokenizer\" is not JSON"));
  }
  return tokenizer_record_from_json(j, where);
}

std::unique_ptr<Tokenizer> tokenizer_for(const std::optional<TokenizerRecord>& r, int vocab) {
  if (r) return load_tokenizer(*r);
  if (vocab <= ByteTokenizer::kVocabSize) return make_byte_tokenizer();
  return nullptr;
}

}  // namespace mt
