#include "train/tokenizer.h"

#include "core/base64.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "train/hf_directory.h"
#include "train/safetensors.h"

namespace mt {

namespace {

constexpr const char* kEmbeddedModelKey = "tokenizer.model";

// The model file a record's metadata carries, checked against the record.
void take_embedded_model(const std::map<std::string, std::string>& meta, TokenizerRecord& r,
                         const std::string& where) {
  const auto it = meta.find(kEmbeddedModelKey);
  if (it == meta.end()) return;
  std::optional<std::string> bytes = base64_decode(it->second);
  MT_REQUIRE(bytes.has_value(), where, "'s metadata entry \"", kEmbeddedModelKey,
             "\" is not base64: the embedded tokenizer is damaged");
  const uint32_t crc = crc32c_update(0, bytes->data(), bytes->size());
  MT_REQUIRE(r.kind != "byte" && crc == r.crc32c, where, "'s embedded tokenizer (crc32c ",
             crc32c_hex(crc), ") is not the one its record names (", r.describe(),
             "): the header is damaged");
  r.model = std::move(*bytes);
}

}  // namespace

std::map<std::string, std::string> tokenizer_metadata(const std::optional<TokenizerRecord>& r) {
  if (!r) return {};
  std::map<std::string, std::string> meta = {{"tokenizer", to_json(*r).dump()}};
  if (!r->model.empty() && r->model.size() <= kMaxEmbeddedTokenizerBytes)
    meta[kEmbeddedModelKey] = base64_encode(r->model);
  return meta;
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
  TokenizerRecord r = tokenizer_record_from_json(j, where);
  take_embedded_model(meta, r, where);
  return r;
}

std::unique_ptr<Tokenizer> tokenizer_for(const std::optional<TokenizerRecord>& r, int vocab) {
  if (r) return load_tokenizer(*r);
  std::unique_ptr<Tokenizer> bytes = make_byte_tokenizer();
  if (vocab <= bytes->vocab_size()) return bytes;
  return nullptr;
}

}  // namespace mt
