#include "data/tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/crc32c.h"
#include "core/error.h"
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

uint32_t file_crc32c(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  MT_REQUIRE(in, "cannot read tokenizer file ", file);
  std::vector<char> buf(1 << 16);
  uint32_t crc = 0;
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    crc = crc32c_update(crc, buf.data(), size_t(in.gcount()));
  }
  return crc;
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
  TokenizerRecord r;
  try {
    r.kind = j.at("kind").get<std::string>();
    if (j.contains("file")) {
      r.file = j.at("file").get<std::string>();
      r.crc32c = uint32_t(std::stoul(j.at("crc32c").get<std::string>(), nullptr, 16));
    }
  } catch (const std::exception& e) {
    throw UsageError(str(where, " has a malformed tokenizer record: ", e.what()));
  }
  MT_REQUIRE(r.kind == "byte" || r.kind == "bpe" || r.kind == "unigram", where,
             " names an unknown tokenizer kind '", r.kind, "'");
  MT_REQUIRE((r.kind == "byte") == r.file.empty(), where,
             " has a tokenizer record whose kind and file disagree");
  return r;
}

TokenizerRecord record_tokenizer_file(const std::string& kind, const std::string& file) {
  TokenizerRecord r;
  r.kind = kind;
  if (kind == "byte") return r;
  std::error_code ec;
  r.file = std::filesystem::absolute(file, ec).lexically_normal().string();
  if (ec) r.file = file;
  r.crc32c = file_crc32c(file);
  return r;
}

std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerRecord& r) {
  if (r.kind == "byte") return make_byte_tokenizer();
  const uint32_t now = file_crc32c(r.file);
  MT_REQUIRE(now == r.crc32c, "tokenizer file ", r.file, " has changed: its CRC-32C is ",
             crc32c_hex(now), " but ", crc32c_hex(r.crc32c),
             " was recorded; the ids would not mean what they meant");
  auto t = load_sentencepiece_tokenizer(r.file);
  MT_REQUIRE(t->kind() == r.kind, "tokenizer file ", r.file, " holds a ", t->kind(),
             " model but the record says ", r.kind);
  return t;
}

bool same_tokenizer(const TokenizerRecord& a, const TokenizerRecord& b) {
  return a.kind == b.kind && a.crc32c == b.crc32c;
}

}  // namespace mt
