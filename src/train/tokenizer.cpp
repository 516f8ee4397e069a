#include "train/tokenizer.h"

#include "core/error.h"
#include "core/json_depth.h"
#include "train/hf_directory.h"
#include "train/safetensors.h"

namespace mt {

std::map<std::string, std::string> tokenizer_metadata(const std::optional<TokenizerRecord>& r) {
  if (!r) return {};
  return {{"tokenizer", to_json(*r).dump()}};
}

std::optional<TokenizerRecord> weights_tokenizer(const std::string& weights_path) {
  if (is_hf_directory(weights_path)) return hf_tokenizer(weights_path);  // its tokenizer.model
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
  std::unique_ptr<Tokenizer> bytes = make_byte_tokenizer();
  if (vocab <= bytes->vocab_size()) return bytes;
  return nullptr;
}

}  // namespace mt
