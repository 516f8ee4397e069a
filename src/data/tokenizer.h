// Tokenizers of `meshtrain prepare`, the trainer's sample and `meshtrain sample`: byte-level
// (id = byte value, vocabulary 256) and SentencePiece models (BPE or unigram). Every one
// round-trips any byte string exactly, valid UTF-8 or not: decode(encode(s)) == s.
//
// A tokenizer is named in datasets, exports and checkpoints by a TokenizerRecord: its kind,
// its model file (none for bytes) and the file's CRC-32C, so a run can refuse data made
// with another tokenizer than the weights it continues.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", "bpe" or "unigram".
  virtual std::string kind() const = 0;
  virtual int vocab_size() const = 0;
  // Appends the ids of `text` to `out`.
  virtual void encode(std::string_view text, std::vector<int>& out) const = 0;
  // The exact bytes; throws UsageError for an id outside the vocabulary.
  virtual std::string decode(std::span<const int> ids) const = 0;

  std::vector<int> encode(std::string_view text) const {
    std::vector<int> out;
    encode(text, out);
    return out;
  }
};

std::unique_ptr<Tokenizer> make_byte_tokenizer();

struct TokenizerRecord {
  std::string kind = "byte";
  std::string file;     // absolute path of the model file; empty for bytes
  uint32_t crc32c = 0;  // of the model file; 0 for bytes
  // The model file's bytes when the record carries them (with_model_bytes, or read from
  // weights: train/tokenizer.h): what travels when the file does not. Not in to_json.
  std::string model;

  // The same record: kind, file and checksum (the bytes follow from the checksum).
  bool operator==(const TokenizerRecord& o) const {
    return kind == o.kind && file == o.file && crc32c == o.crc32c;
  }
  // "byte", or "bpe /abs/tokenizer.model (crc32c 1a2b3c4d)"
  std::string describe() const;
};

nlohmann::json to_json(const TokenizerRecord& r);
// Throws UsageError naming `where` for a malformed record.
TokenizerRecord tokenizer_record_from_json(const nlohmann::json& j, const std::string& where);

// The record of a model file as it is now (reads it for the checksum, through
// core/input_file.h; `what` names it in errors, e.g. the flag that gave it).
TokenizerRecord record_tokenizer_file(const std::string& kind, const std::string& file,
                                      const std::string& what = "tokenizer file");

// Loads what the record names, checking the file's checksum (UsageError when it changed):
// from the bytes it carries when it has them (its file may have moved or gone), else its file.
std::unique_ptr<Tokenizer> load_tokenizer(const TokenizerRecord& r);
// The record with its model's bytes (read from its file when it does not carry them yet,
// checked against its CRC-32C). A byte record is returned as it is.
TokenizerRecord with_model_bytes(TokenizerRecord r);

// The same tokenizer? Kind and checksum decide; the file may have moved.
bool same_tokenizer(const TokenizerRecord& a, const TokenizerRecord& b);

}  // namespace mt
