#include "data/tokenizer.h"

#include <cstdio>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/input_file.h"
#include "data/sentencepiece_tokenizer.h"

namespace mt {

namespace {

class ByteLevelTokenizer final : public Tokenizer {
 public:
  std::string kind() const override { return "byte"; }
  int vocab_size() const override { return 256; }
  void encode(std::string_view text, std::vector<int>& out) const override {
    const size_t base = out.size();
    out.resize(base + text.size());
    // Through unsigned char: bytes >= 0x80 must become 128..255, not negative ids.
    for (size_t i = 0; i < text.size(); ++i) out[base + i] = static_cast<unsigned char>(text[i]);
  }
  std::string decode(std::span<const int> ids) const override {
    std::string text(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      MT_REQUIRE(ids[i] >= 0 && ids[i] < 256, "token id ", ids[i], " at position ", i,
                 " is not a byte; the byte tokenizer decodes ids 0..255 only");
      text[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
    }
    return text;
  }
};

// The model file's bytes, through the one bounded reader (a FIFO is refused, not waited on).
std::string model_bytes(const std::string& file, const std::string& what) {
  return read_input_file(what, file, kMaxModelFileBytes);
}

uint32_t crc_of(const std::string& bytes) {
  return crc32c_update(0, bytes.data(), bytes.size());
}

// A record's field as a string, or UsageError naming `where`.
std::string string_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  MT_REQUIRE(it != j.end() && it->is_string(), where, " has a malformed tokenizer record: \"", key,
             "\" ", it == j.end() ? std::string("is missing") : std::string("is not a string"));
  return it->get<std::string>();
}

// "1a2b3c4d" (crc32c_hex) back to its value.
uint32_t parse_crc(const std::string& hex, const std::string& where) {
  MT_REQUIRE(!hex.empty() && hex.size() <= 8 &&
                 hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos,
             where, " has a malformed tokenizer record: crc32c '", hex,
             "' is not 1 to 8 hexadecimal digits");
  return uint32_t(std::stoul(hex, nullptr, 16));
}

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
  return std::make_unique<ByteLevelTokenizer>();
}

std::string TokenizerRecord::describe() const {
  if (file.empty()) return kind;
  return str(kind, " ", file, " (crc32c ", crc32c_hex(crc32c), ")");
}

nlohmann::json to_json(const TokenizerRecord& r) {
  nlohmann::json j = {{"kind", r.kind}};
  if (!r.file.empty()) {
    j["file"] = r.file;
    j["crc32c"] = crc32c_hex(r.crc32c);
  }
  return j;
}

TokenizerRecord tokenizer_record_from_json(const nlohmann::json& j, const std::string& where) {
  MT_REQUIRE(j.is_object(), where, " has a malformed tokenizer record: it is not a JSON object");
  TokenizerRecord r;
  r.kind = string_field(j, "kind", where);
  if (j.contains("file")) {
    r.file = string_field(j, "file", where);
    r.crc32c = parse_crc(string_field(j, "crc32c", where), where);
  }
  MT_REQUIRE(r.kind == "byte" || r.kind == "bpe" || r.kind == "unigram", where,
             " names an unknown tokenizer kind '", r.kind, "'");
  MT_REQUIRE((r.kind == "byte") == r.file.empty(), where,
             " has a tokenizer record whose kind and file disagree");
  return r;
}

TokenizerRecord record_tokenizer_file(const std::string& kind, const std::string& file,
                                      const std::string& what) {
  TokenizerRecord r;
  r.kind = kind;
  if (kind == "byte") return r;
  std::error_code ec;
  r.file = std::filesystem::absolute(file, ec).lexically_normal().string();
  if (ec) r.file = file;
  // The bytes are not kept: a record names a file, and a load checks the file as it is then
  // (with_model_bytes takes them when they are to travel).
  r.crc32c = crc_of(model_bytes(file, what));
  return r;
}

TokenizerRecord with_model_bytes(TokenizerRecord r) {
  if (r.kind == "byte") return r;
  // One read: the bytes checked are the bytes kept.
  if (r.model.empty()) r.model = model_bytes(r.file, "tokenizer file");
  const uint32_t now = crc_of(r.model);
  MT_REQUIRE(now == r.crc32c, "tokenizer file ", r.file, " has changed: its CRC-32C is ",
             crc32c_hex(now), " but ", crc32c_hex(r.crc32c),
             " was recorded; the ids would not mean what they meant");
  return r;
}

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerRecord& r) {
  if (r.kind == "byte") return make_byte_tokenizer();
  const TokenizerRecord checked = with_model_bytes(r);
  auto t = sentencepiece_tokenizer_from_bytes(checked.model, r.file);
  MT_REQUIRE(t->kind() == r.kind, "tokenizer file ", r.file, " holds a ", t->kind(),
             " model but the record says ", r.kind);
  return t;
}

bool same_tokenizer(const TokenizerRecord& a, const TokenizerRecord& b) {
  return a.kind == b.kind && a.crc32c == b.crc32c;
}

}  // namespace mt
