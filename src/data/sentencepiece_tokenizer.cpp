#include "data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <array>
#include <cstdio>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "data/utf8.h"

namespace mt {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's ' '

int proto_model_type(std::string_view proto);

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& bytes, const std::string& file) : file_(file) {
    // SentencePiece's status text is its own assertion ("[model_proto->ParseFromArray(...)]"):
    // the user needs to know what the file is not.
    MT_REQUIRE(!bytes.empty() && sp_.LoadFromSerializedProto(bytes).ok(), "tokenizer ", file,
               " is not a SentencePiece model (",
               bytes.empty() ? "it is empty" : "its bytes do not parse as one",
               "); give the tokenizer.model of a dataset of meshtrain prepare, or another "
               "SentencePiece .model file");
    vocab_ = sp_.GetPieceSize();
    const int type = proto_model_type(sp_.serialized_model_proto());
    MT_REQUIRE(type == 1 || type == 2, "SentencePiece model ", file, " is a ",
               type == 3 ? "word" : "char", " model; meshtrain takes bpe and unigram models");
    kind_ = type == 2 ? "bpe" : "unigram";
    // The piece texts, with the space marker already turned back into ' '.
    piece_text_.resize(size_t(vocab_));
    piece_byte_.assign(size_t(vocab_), -1);
    for (int id = 0; id < vocab_; ++id) {
      const std::string& p = sp_.IdToPiece(id);
      if (sp_.IsByte(id)) {
        unsigned v = 0;
        MT_REQUIRE(std::sscanf(p.c_str(), "<0x%2X>", &v) == 1, "SentencePiece model ", file,
                   " has a byte piece '", p, "' that names no byte");
        piece_byte_[size_t(id)] = int(v);
        byte_id_[v] = id;
        continue;
      }
      if (sp_.IsControl(id) || sp_.IsUnknown(id) || sp_.IsUnused(id)) continue;
      std::string text;
      for (size_t i = 0; i < p.size();) {
        if (p.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
          text += ' ';
          i += kSpaceMarker.size();
        } else {
          text += p[i++];
        }
      }
      piece_text_[size_t(id)] = std::move(text);
    }
    for (int b = 0; b < 256; ++b)
      MT_REQUIRE(byte_id_[size_t(b)] >= 0, "SentencePiece model ", file,
                 " has no byte piece for byte ", b,
                 " (trained without byte_fallback): it could not store every input byte");
    probe_exactness();
  }

  std::string kind() const override { return kind_; }
  int vocab_size() const override { return vocab_; }

  void encode(std::string_view text, std::vector<int>& out) const override {
    std::vector<int> ids;
    for (size_t i = 0; i < text.size();) {
      const size_t n = sentencepiece_safe_run(text, i);
      if (n == 0) {
        out.push_back(byte_id_[static_cast<unsigned char>(text[i])]);
        ++i;
        continue;
      }
      const std::string_view run = text.substr(i, n);
      ids.clear();
      const auto status = sp_.Encode(run, &ids);
      MT_CHECK(status.ok(), "SentencePiece could not encode ", n, " bytes: ", status.ToString());
      if (decodes_to(ids, run)) {
        out.insert(out.end(), ids.begin(), ids.end());
      } else {
        for (char c : run) out.push_back(byte_id_[static_cast<unsigned char>(c)]);
      }
      i += n;
    }
  }

  std::string decode(std::span<const int> ids) const override {
    std::string text;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int id = ids[i];
      MT_REQUIRE(id >= 0 && id < vocab_, "token id ", id, " at position ", i,
                 " is outside the vocabulary of ", file_, " (", vocab_, " pieces)");
      if (piece_byte_[size_t(id)] >= 0)
        text += static_cast<char>(piece_byte_[size_t(id)]);
      else
        text += piece_text_[size_t(id)];
    }
    return text;
  }

 private:
  bool decodes_to(const std::vector<int>& ids, std::string_view want) const {
    size_t at = 0;
    for (int id : ids) {
      if (id < 0 || id >= vocab_) return false;
      if (piece_byte_[size_t(id)] >= 0) {
        if (at >= want.size() || static_cast<unsigned char>(want[at]) != piece_byte_[size_t(id)])
          return false;
        ++at;
        continue;
      }
      const std::string& p = piece_text_[size_t(id)];
      if (want.compare(at, p.size(), p) != 0) return false;
      at += p.size();
    }
    return at == want.size();
  }

  // A model that adds a dummy prefix, collapses spaces or normalizes Unicode would be
  // caught run by run (and stored as bytes); refuse it up front instead, since nearly
  // every run would fall back.
  void probe_exactness() const {
    static const std::array<std::string_view, 4> probes = {
        "word", " two  spaces ", "Caf\xC3\xA9 \xEF\xBC\xA1", "x\ty"};  // fullwidth A: NFKC
    std::vector<int> ids;
    for (std::string_view p : probes) {
      ids.clear();
      const auto status = sp_.Encode(p, &ids);
      MT_REQUIRE(status.ok() && decodes_to(ids, p), "SentencePiece model ", file_,
                 " does not reproduce its input exactly (it normalizes text or adds a dummy "
                 "prefix); meshtrain needs a byte-exact model: train one with "
                 "'meshtrain prepare --tokenizer bpe|unigram'");
    }
  }

  std::string file_, kind_;
  sentencepiece::SentencePieceProcessor sp_;
  int vocab_ = 0;
  std::vector<std::string> piece_text_;
  std::vector<int> piece_byte_;  // the byte of a byte piece, else -1
  std::array<int, 256> byte_id_{[] {
    std::array<int, 256> a{};
    a.fill(-1);
    return a;
  }()};
};

class FunctionSentences final : public sentencepiece::SentenceIterator {
 public:
  explicit FunctionSentences(const std::function<bool(std::string&)>& next) : next_(next) {
    Next();
  }
  bool done() const override { return done_; }
  void Next() override { done_ = !next_(value_); }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::function<bool(std::string&)>& next_;
  std::string value_;
  bool done_ = false;
};

// The model type (TrainerSpec.model_type: 1 unigram, 2 bpe, 3 word, 4 char) from the
// serialized ModelProto. Debian ships no header for the proto, so this walks the protobuf
// wire format: ModelProto field 2 is the TrainerSpec message, whose field 3 is the type.
int proto_model_type(std::string_view proto) {
  auto varint = [](std::string_view s, size_t& i) -> uint64_t {
    uint64_t v = 0;
    for (int shift = 0; i < s.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(s[i++]);
      v |= uint64_t(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    return v;
  };
  // Returns the payload of length-delimited field `want` (the last one), or "".
  auto find = [&](std::string_view s, uint64_t want, uint64_t* varint_value) {
    std::string_view found;
    for (size_t i = 0; i < s.size();) {
      const uint64_t key = varint(s, i);
      const uint64_t field = key >> 3, wire = key & 7;
      if (wire == 0) {
        const uint64_t v = varint(s, i);
        if (field == want && varint_value) *varint_value = v;
      } else if (wire == 2) {
        const uint64_t len = varint(s, i);
        if (len > s.size() - i) break;
        if (field == want) found = s.substr(i, len);
        i += len;
      } else if (wire == 1) {
        i += 8;
      } else if (wire == 5) {
        i += 4;
      } else {
        break;
      }
    }
    return found;
  };
  const std::string_view trainer_spec = find(proto, 2, nullptr);
  uint64_t type = 1;  // the proto's default: unigram
  find(trainer_spec, 3, &type);
  return int(type);
}

// SentencePiece's status text opens with its own assertion ("Internal: ./src/x.cc(580)
// [condition] "), which tells a user nothing: the words after it are the reason, and the
// common one, a vocabulary too small for the text's characters, is said in ours.
std::string training_failure(const SentencePieceTraining& t, const std::string& status) {
  std::string why = status;
  const size_t assertion = why.find(") [");
  const size_t reason = assertion == std::string::npos ? assertion : why.find("] ", assertion);
  if (reason != std::string::npos) why = why.substr(reason + 2);
  int asked = 0, needed = 0;
  if (std::sscanf(why.c_str(), "Vocabulary size is smaller than required_chars. %d vs %d", &asked,
                  &needed) == 2)
    return str("--vocab-size ", t.vocab_size, " is too small for this text: its distinct ",
               "characters, the byte pieces and the special pieces need at least ", needed,
               " pieces; give --vocab-size ", needed, " or more");
  return str("SentencePiece could not train a ", t.kind, " model of ", t.vocab_size,
             " pieces: ", why);
}

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& file,
                                                        const std::string& what) {
  return sentencepiece_tokenizer_from_bytes(read_input_file(what, file, kMaxModelFileBytes), file);
}

std::unique_ptr<Tokenizer> sentencepiece_tokenizer_from_bytes(const std::string& bytes,
                                                              const std::string& file) {
  return std::make_unique<SentencePieceTokenizer>(bytes, file);
}

void train_sentencepiece(const SentencePieceTraining& t,
                         const std::function<bool(std::string&)>& next,
                         const std::string& model_file) {
  MT_REQUIRE(t.kind == "bpe" || t.kind == "unigram", "unknown SentencePiece model type '", t.kind,
             "' (bpe or unigram)");
  // 3 special pieces (<unk> <s> </s>) + 256 byte pieces + at least one piece of its own.
  MT_REQUIRE(t.vocab_size >= 260, "--vocab-size ", t.vocab_size,
             " is too small: SentencePiece with byte fallback needs 259 pieces for the "
             "specials and bytes, plus pieces of its own");
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", t.kind},
      {"vocab_size", std::to_string(t.vocab_size)},
      // Byte-exact: no normalization, no dummy prefix, spaces as they are, and any byte
      // the pieces do not cover as a byte piece.
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "false"},
      // A small corpus may not hold enough distinct pieces for the size asked: take fewer.
      {"hard_vocab_limit", "false"},
      {"num_threads", std::to_string(std::max(1, t.threads))},
      {"minloglevel", "2"},
      {"model_prefix", ""},
  };
  FunctionSentences sentences(next);
  std::string model;
  sentencepiece::util::Status status;
  try {
    status = sentencepiece::SentencePieceTrainer::Train(args, &sentences, &model);
  } catch (const std::system_error& e) {
    throw RuntimeError(str("SentencePiece could not start its ", t.threads, " training threads (",
                           e.what(),
                           "): the process or user limit is lower; give a smaller --threads"));
  }
  if (!status.ok()) throw UsageError(training_failure(t, status.ToString()));
  write_file_atomic(model_file, model);
}

void sentencepiece_training_sentences(std::string_view text,
                                      const std::function<void(std::string_view)>& emit) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = sentencepiece_safe_run(text, i);
    if (n == 0) {
      ++i;
      continue;
    }
    std::string_view run = text.substr(i, n);
    i += n;
    while (!run.empty()) {
      const size_t nl = run.find('\n');
      const std::string_view line = run.substr(0, nl);
      if (!line.empty()) emit(line);
      if (nl == std::string_view::npos) break;
      run.remove_prefix(nl + 1);
    }
  }
}

}  // namespace mt
