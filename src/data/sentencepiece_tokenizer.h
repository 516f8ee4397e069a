// SentencePiece (Debian's libsentencepiece, the library behind Llama's and T5's
// tokenizers), made byte-exact:
//   - models meshtrain trains use no normalization (identity rule, no dummy prefix, spaces
//     kept) and byte fallback, so every piece decodes to exactly the bytes it came from;
//   - SentencePiece only ever sees runs of valid UTF-8 without U+2581 or NUL (data/utf8.h):
//     it would turn bad bytes into U+FFFD and read a literal U+2581 as a space. The bytes
//     between runs become its byte pieces <0xXX>;
//   - each run's ids are decoded again and compared; a run that does not come back exactly
//     (a given model that normalizes something) is stored as byte pieces instead.
// Decoding is done here piece by piece for the same reason (SentencePiece's own Decode
// replaces invalid byte sequences with U+FFFD).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace mt {

// Loads a .model file, read through core/input_file.h (a FIFO is refused, not waited on;
// at most kMaxModelFileBytes). Throws UsageError, naming `what` and the file, when it
// cannot be read, is not a SentencePiece model, has no byte pieces (trained without
// byte_fallback), or normalizes text.
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& file,
                                                        const std::string& what = "tokenizer");
// The same from the model's bytes, already read from `file` (named in messages).
std::unique_ptr<Tokenizer> sentencepiece_tokenizer_from_bytes(const std::string& bytes,
                                                              const std::string& file);

struct SentencePieceTraining {
  std::string kind = "bpe";  // bpe | unigram
  int vocab_size = 8192;
  int threads = 2;
};

// Trains a model on the sentences `next` yields (false: no more) and writes it to
// `model_file` (the .model bytes). Throws UsageError when SentencePiece refuses (a
// vocabulary too small for the characters and bytes, no usable text).
void train_sentencepiece(const SentencePieceTraining& t,
                         const std::function<bool(std::string&)>& next,
                         const std::string& model_file);

// Lines of `text` as training sentences: only what encoding hands SentencePiece (the
// safe runs), split at newlines; empty pieces dropped.
void sentencepiece_training_sentences(std::string_view text,
                                      const std::function<void(std::string_view)>& emit);

}  // namespace mt
