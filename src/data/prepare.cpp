#include "data/prepare.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "core/rng.h"
#include "core/threads.h"
#include "data/document_shuffle.h"
#include "data/documents.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/shard_writer.h"
#include "data/token_shard.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr uint64_t kSplitStream = 0x73706c6974ull;  // "split"

bool is_builtin_kind(const std::string& t) {
  return t == "byte" || t == "bpe" || t == "unigram";
}

void check_tokenizer_options(const PrepareOptions& o) {
  const bool trained = o.tokenizer == "bpe" || o.tokenizer == "unigram";
  // A vocabulary size only a trained tokenizer can honour is refused, not dropped.
  MT_REQUIRE(trained || !o.vocab_size_given, "--vocab-size ", o.vocab_size,
             " applies to a tokenizer prepare trains (--tokenizer bpe or unigram); --tokenizer ",
             o.tokenizer,
             o.tokenizer == "byte" ? " has 256 ids, one per byte" : " brings its own vocabulary",
             ": drop --vocab-size or train one");
  if (trained) {
    MT_REQUIRE(o.vocab_size >= 260, "--vocab-size ", o.vocab_size,
               " is too small: SentencePiece with byte fallback needs 259 pieces for the "
               "specials and bytes, plus pieces of its own");
    // SentencePiece's trainer spends time linear in the size asked for, whatever the text:
    // 2^31-1 took minutes on a 4 KB corpus. 2^22 is 16 times the largest tokenizers in use.
    constexpr int kMaxTrainedVocab = 1 << 22;
    MT_REQUIRE(o.vocab_size <= kMaxTrainedVocab, "--vocab-size ", o.vocab_size,
               " is too large: a tokenizer prepare trains has at most ", kMaxTrainedVocab,
               " pieces");
  } else if (o.tokenizer != "byte") {
    struct stat st {};
    MT_REQUIRE(::stat(o.tokenizer.c_str(), &st) == 0 || (errno != ENOENT && errno != ENOTDIR),
               "--tokenizer must be byte, bpe, unigram or an existing SentencePiece .model "
               "file (got '",
               o.tokenizer, "')");
  }
}

// Replacing a dataset is fine; replacing anything else is not prepare's to do. Missing
// parents are created, so the nearest existing one must be a writable directory.
void check_out_dir(const PrepareOptions& o) {
  MT_REQUIRE(!o.out.empty(), "give the dataset directory to write with --out DIR");
  require_output_dir("--out", o.out);
  std::error_code ec;
  MT_REQUIRE(!fs::is_directory(o.out, ec) || fs::is_empty(o.out, ec) || is_dataset_dir(o.out),
             "--out ", o.out, " is a directory that is not a dataset (no ", kDatasetManifest,
             "); prepare replaces only datasets it wrote");
}

void check_options(const PrepareOptions& o) {
  check_out_dir(o);
  MT_REQUIRE(std::isfinite(o.val_fraction) && o.val_fraction >= 0 && o.val_fraction < 1,
             "--val-fraction must be in [0, 1) (got ", o.val_fraction, ")");
  MT_REQUIRE(o.shard_tokens > 0 && o.shard_tokens <= INT32_MAX, "--shard-tokens ", o.shard_tokens,
             " must be between 1 and 2^31-1 (the shard header's int32)");
  MT_REQUIRE(std::isfinite(o.tokenizer_sample_mb) && o.tokenizer_sample_mb > 0,
             "--tokenizer-sample-mb must be > 0");
  MT_REQUIRE(!o.separator.empty() && o.separator.find('\n') == std::string::npos,
             "--separator must be one non-empty line");
  require_thread_count("--threads", o.threads);
  parse_document_rule(o.documents);
  check_tokenizer_options(o);
}

// Directories inside the inputs that prepare wrote: the dataset being replaced (by any
// name) and every other dataset. Read as text, their manifest would become training data.
OwnOutputTest own_outputs_of(const PrepareOptions& o) {
  return [out = file_id(o.out)](const std::string& dir) {
    return (out && file_id(dir) == out) || is_dataset_dir(dir);
  };
}

std::string end_marker(DocumentRule rule, const std::string& separator) {
  return rule == DocumentRule::separator ? separator + "\n" : "\n";
}

nlohmann::json split_json(const SplitWriter& w, const std::string& name) {
  return {{"shards", w.shards()},
          {"docs", name + ".docs"},
          {"tokens", w.tokens()},
          {"documents", w.documents()},
          {"bytes", w.bytes()}};
}

using Report = std::function<void(const char* phase, int64_t docs, int64_t tokens)>;

// Reads the first --tokenizer-sample-mb of documents and trains a SentencePiece model on
// them into `model_path`; the documents stay in `sample`, to be encoded first.
void train_tokenizer(const PrepareOptions& o, DocumentReader& reader, const Report& report,
                     std::vector<std::string>& sample, const std::string& model_path) {
  const double want = o.tokenizer_sample_mb * 1e6;
  double have = 0;
  std::string doc;
  while (have < want && reader.next(doc)) {
    have += double(doc.size());
    sample.push_back(std::move(doc));
    if (sample.size() % 1024 == 0) report("sampling", int64_t(sample.size()), 0);
  }
  MT_REQUIRE(have > 0, "the corpus is empty: no text to train a tokenizer on");
  report("training tokenizer", int64_t(sample.size()), 0);
  std::vector<std::string> sentences;
  for (const std::string& d : sample)
    sentencepiece_training_sentences(d, [&](std::string_view s) { sentences.emplace_back(s); });
  MT_REQUIRE(!sentences.empty(), "the corpus holds no text SentencePiece can train on");
  size_t next = 0;
  SentencePieceTraining t;
  t.kind = o.tokenizer;
  t.vocab_size = o.vocab_size;
  t.threads = o.threads;
  auto next_sentence = [&](std::string& s) {
    if (next == sentences.size()) return false;
    s = std::move(sentences[next++]);
    return true;
  };
  train_sentencepiece(t, next_sentence, model_path);
}

// Runs work(t) for t = 0..threads-1, t = 0 on this thread. A thread that cannot be started
// (a process limit) is a clean error once the started ones are joined: a std::thread
// destroyed unjoined would end the process (SIGABRT), leaving the dataset's temporary.
void run_on_threads(size_t threads, const std::function<void(size_t)>& work) {
  std::vector<std::thread> pool;
  std::string start_error;
  for (size_t t = 1; t < threads && start_error.empty(); ++t) {
    try {
      pool.emplace_back(work, t);
    } catch (const std::system_error& e) {
      start_error = e.what();
    }
  }
  if (start_error.empty()) work(0);
  for (std::thread& th : pool) th.join();
  if (!start_error.empty())
    throw RuntimeError(str("prepare could start only ", pool.size() + 1, " of --threads ", threads,
                           " encoding threads (", start_error,
                           "): the process or user limit is lower; give a smaller --threads"));
}

// Encodes every document (the sample first) into the splits, in input order. SentencePiece
// encodes on one thread: documents go in batches of about --encode-batch-bytes to --threads
// threads (encode is const), so the output does not depend on the thread count. Bytes need
// no help. Returns the documents and the bytes of text seen.
std::pair<uint64_t, uint64_t> encode_corpus(const PrepareOptions& o, const Tokenizer& tok,
                                            std::vector<std::string>& sample,
                                            DocumentReader& reader, const std::string& marker,
                                            SplitWriter& train, SplitWriter* val,
                                            const Report& report) {
  const std::vector<int> end_ids = tok.encode(marker);
  uint64_t index = 0, content_bytes = 0;
  auto add = [&](const std::string& doc, const std::vector<int>& ids) {
    SplitWriter& w = val && is_validation_document(index, o.seed, o.val_fraction) ? *val : train;
    w.add_document(ids, end_ids, doc.size() + marker.size());
    content_bytes += doc.size();
    if (++index % 1024 == 0)
      report("encoding", int64_t(index), train.tokens() + (val ? val->tokens() : 0));
  };
  const size_t threads = tok.kind() == "byte" ? 1 : size_t(o.threads);
  std::vector<std::string> batch;
  std::vector<std::vector<int>> batch_ids;
  size_t batch_bytes = 0;
  auto flush = [&] {
    batch_ids.resize(batch.size());
    std::vector<std::exception_ptr> errors(threads);
    run_on_threads(threads, [&](size_t t) {
      try {
        for (size_t i = t; i < batch.size(); i += threads) {
          batch_ids[i].clear();
          tok.encode(batch[i], batch_ids[i]);
        }
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t i = 0; i < batch.size(); ++i) add(batch[i], batch_ids[i]);
    batch.clear();
    batch_bytes = 0;
  };
  std::vector<int> ids;
  auto push = [&](std::string&& doc) {
    if (threads == 1) {  // straight through: memory stays one document
      ids.clear();
      tok.encode(doc, ids);
      add(doc, ids);
      return;
    }
    batch_bytes += doc.size();
    batch.push_back(std::move(doc));
    if (batch_bytes >= o.encode_batch_bytes || batch.size() >= 65536) flush();
  };
  for (std::string& d : sample) push(std::move(d));
  sample.clear();
  sample.shrink_to_fit();
  std::string doc;
  while (reader.next(doc)) push(std::move(doc));
  flush();
  report("encoding", int64_t(index), train.tokens() + (val ? val->tokens() : 0));
  return {index, content_bytes};
}

void check_split_counts(const PrepareOptions& o, uint64_t documents, uint64_t content_bytes,
                        const SplitWriter& train, const SplitWriter* val) {
  MT_REQUIRE(content_bytes > 0, "the corpus is empty (", documents,
             " documents, 0 bytes of text): nothing to prepare");
  MT_REQUIRE(train.documents() > 0, "no document went to training (", documents,
             " documents, --val-fraction ", o.val_fraction, ")");
  MT_REQUIRE(!val || val->documents() > 0, "none of the ", documents,
             " documents went to validation with --val-fraction ", o.val_fraction, " and --seed ",
             o.seed,
             "; give more documents (see --documents) or a larger "
             "fraction, or --val-fraction 0");
}

void write_manifest(const std::string& dir, const PrepareOptions& o, const Tokenizer& tok,
                    const TokenizerRecord& record, DocumentRule rule, const std::string& marker,
                    uint64_t input_bytes, const SplitWriter& train, const SplitWriter* val) {
  nlohmann::json tj = to_json(record);
  if (tj.contains("file")) tj["file"] = kDatasetTokenizerModel;  // relative: the dataset can move
  nlohmann::json m = {{"meshtrain_dataset", kDatasetFormat},
                      {"tokenizer", tj},
                      {"vocab_size", tok.vocab_size()},
                      {"documents", document_rule_name(rule)},
                      {"end_marker", marker},
                      {"seed", o.seed},
                      {"shuffle_seed", o.shuffle ? nlohmann::json(o.shuffle_seed) : nullptr},
                      {"val_fraction", o.val_fraction},
                      {"shard_tokens", o.shard_tokens},
                      {"input_bytes", input_bytes},
                      {"train", split_json(train, "train")}};
  if (rule == DocumentRule::separator) m["separator"] = o.separator;
  if (val) m["val"] = split_json(*val, "val");
  write_file_atomic(dir + "/" + kDatasetManifest, m.dump(2) + "\n");
}

// The split's name while it is written in input order, when it is to be shuffled after.
std::string in_order_name(const PrepareOptions& o, const std::string& name) {
  return o.shuffle ? name + "-in-order" : name;
}

// Finishes a split; with shuffling, returns it rewritten in the seeded document order under
// its final name (the input-order files removed), else returns it as it is.
std::unique_ptr<SplitWriter> finish_split(const PrepareOptions& o, const std::string& dir,
                                          const std::string& name, int64_t vocab,
                                          std::unique_ptr<SplitWriter> written) {
  written->finish();
  if (!o.shuffle) return written;
  auto shuffled = std::make_unique<SplitWriter>(dir, name, o.shard_tokens, vocab);
  write_shuffled_split(dir, written->shards(), in_order_name(o, name) + ".docs", written->bytes(),
                       o.shuffle_seed, name, *shuffled);
  shuffled->finish();
  return shuffled;
}

}  // namespace

bool is_validation_document(uint64_t index, uint64_t seed, double val_fraction) {
  return uniform01(seed, kSplitStream, index) < val_fraction;
}

Dataset prepare_dataset(const PrepareOptions& o,
                        const std::function<void(const PrepareProgress&)>& progress) {
  check_options(o);
  const DocumentRule rule = parse_document_rule(o.documents);
  const CorpusListing listing = list_corpus_sources(o.inputs, o.skip_binary, own_outputs_of(o));
  // A given model is read once and checked before anything is written; the dataset gets
  // exactly the bytes that were checked.
  std::string given_model;
  if (!is_builtin_kind(o.tokenizer)) {
    given_model = read_input_file("--tokenizer", o.tokenizer, kMaxModelFileBytes);
    sentencepiece_tokenizer_from_bytes(given_model, o.tokenizer);
  }
  // The dataset's parent may not exist yet (data/ in a fresh checkout): publish_dir_atomic
  // creates it.
  publish_dir_atomic(o.out, [&](const std::string& tmp) {
    DocumentReader reader(listing.sources, rule, o.separator);
    const Report report = [&](const char* phase, int64_t docs, int64_t tokens) {
      if (progress) progress({phase, reader.bytes_read(), reader.total_bytes(), docs, tokens});
    };
    std::vector<std::string> sample;  // documents read to train the tokenizer
    std::unique_ptr<Tokenizer> tok = make_byte_tokenizer();
    TokenizerRecord record;
    const std::string model_path = tmp + "/" + kDatasetTokenizerModel;
    if (o.tokenizer != "byte") {
      if (is_builtin_kind(o.tokenizer))
        train_tokenizer(o, reader, report, sample, model_path);
      else
        write_file_atomic(model_path, given_model);
      tok = load_sentencepiece_tokenizer(model_path);
      record = record_tokenizer_file(tok->kind(), model_path);
    }
    record.kind = tok->kind();
    const std::string marker = end_marker(rule, o.separator);
    // Version-1 shards whenever the tokenizer's ids fit uint16 (docs/contracts.md §10).
    const int64_t vocab = tok->vocab_size();
    auto train =
        std::make_unique<SplitWriter>(tmp, in_order_name(o, "train"), o.shard_tokens, vocab);
    std::unique_ptr<SplitWriter> val;
    if (o.val_fraction > 0)
      val = std::make_unique<SplitWriter>(tmp, in_order_name(o, "val"), o.shard_tokens, vocab);
    const auto [documents, content_bytes] =
        encode_corpus(o, *tok, sample, reader, marker, *train, val.get(), report);
    check_split_counts(o, documents, content_bytes, *train, val.get());
    train = finish_split(o, tmp, "train", vocab, std::move(train));
    if (val) val = finish_split(o, tmp, "val", vocab, std::move(val));
    write_manifest(tmp, o, *tok, record, rule, marker, reader.bytes_read(), *train, val.get());
  });
  Dataset d = read_dataset(o.out);
  d.skipped_binary = listing.skipped_binary;
  d.skipped_outputs = listing.skipped_outputs;
  return d;
}

}  // namespace mt
