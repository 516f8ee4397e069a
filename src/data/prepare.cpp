#include "data/prepare.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/documents.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/shard_writer.h"
#include "data/token_shard.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

constexpr int kDatasetFormat = 1;
constexpr const char* kManifest = "manifest.json";
constexpr const char* kModelName = "tokenizer.model";
constexpr uint64_t kSplitStream = 0x73706c6974ull;  // "split"

bool is_builtin_kind(const std::string& t) {
  return t == "byte" || t == "bpe" || t == "unigram";
}

void check_options(const PrepareOptions& o) {
  MT_REQUIRE(!o.out.empty(), "give the dataset directory to write with --out DIR");
  MT_REQUIRE(std::isfinite(o.val_fraction) && o.val_fraction >= 0 && o.val_fraction < 1,
             "--val-fraction must be in [0, 1) (got ", o.val_fraction, ")");
  MT_REQUIRE(o.shard_tokens > 0 && o.shard_tokens <= INT32_MAX, "--shard-tokens ", o.shard_tokens,
             " must be between 1 and 2^31-1 (the shard header's int32)");
  MT_REQUIRE(std::isfinite(o.tokenizer_sample_mb) && o.tokenizer_sample_mb > 0,
             "--tokenizer-sample-mb must be > 0");
  MT_REQUIRE(!o.separator.empty() && o.separator.find('\n') == std::string::npos,
             "--separator must be one non-empty line");
  parse_document_rule(o.documents);
  if (o.tokenizer == "bpe" || o.tokenizer == "unigram") {
    MT_REQUIRE(o.vocab_size <= kMaxShardVocab, "--vocab-size ", o.vocab_size,
               " does not fit a token shard: uint16 ids allow a vocabulary of at most ",
               kMaxShardVocab);
    MT_REQUIRE(o.vocab_size >= 260, "--vocab-size ", o.vocab_size,
               " is too small: SentencePiece with byte fallback needs 259 pieces for the "
               "specials and bytes, plus pieces of its own");
  } else if (o.tokenizer != "byte") {
    std::error_code ec;
    MT_REQUIRE(fs::is_regular_file(o.tokenizer, ec),
               "--tokenizer must be byte, bpe, unigram "
               "or an existing SentencePiece .model file (got '",
               o.tokenizer, "')");
  }
  // Replacing a dataset is fine; replacing anything else is not prepare's to do.
  std::error_code ec;
  if (fs::exists(o.out, ec)) {
    MT_REQUIRE(fs::is_directory(o.out, ec), "--out ", o.out, " exists and is not a directory");
    MT_REQUIRE(fs::is_empty(o.out, ec) || is_dataset_dir(o.out), "--out ", o.out,
               " is a directory that is not a dataset (no ", kManifest,
               "); prepare replaces only datasets it wrote");
  }
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

DatasetSplit split_from_json(const nlohmann::json& j, const fs::path& dir) {
  DatasetSplit s;
  for (const auto& name : j.at("shards"))
    s.shards.push_back((dir / name.get<std::string>()).string());
  s.docs = (dir / j.at("docs").get<std::string>()).string();
  s.tokens = j.at("tokens").get<int64_t>();
  s.documents = j.at("documents").get<int64_t>();
  s.bytes = j.at("bytes").get<uint64_t>();
  return s;
}

}  // namespace

bool is_validation_document(uint64_t index, uint64_t seed, double val_fraction) {
  return uniform01(seed, kSplitStream, index) < val_fraction;
}

bool is_dataset_dir(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kManifest);
  if (!in) return false;
  try {
    return nlohmann::json::parse(in).value("meshtrain_dataset", 0) > 0;
  } catch (const std::exception&) {
    return false;
  }
}

Dataset read_dataset(const std::string& dir_in) {
  const fs::path dir = fs::absolute(dir_in).lexically_normal();
  const std::string where = (fs::path(dir_in) / kManifest).string();
  std::ifstream in(dir / kManifest);
  MT_REQUIRE(in, "dataset ", dir_in, " has no ", kManifest, " (make one with meshtrain prepare)");
  Dataset d;
  d.dir = dir.string();
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    MT_REQUIRE(j.value("meshtrain_dataset", 0) == kDatasetFormat, where,
               " is not a dataset manifest of format ", kDatasetFormat);
    nlohmann::json tok = j.at("tokenizer");
    if (tok.contains("file")) tok["file"] = (dir / tok["file"].get<std::string>()).string();
    d.tokenizer = tokenizer_record_from_json(tok, where);
    d.rule = j.at("documents").get<std::string>();
    d.separator = j.value("separator", "");
    d.train = split_from_json(j.at("train"), dir);
    if (j.contains("val")) d.val = split_from_json(j.at("val"), dir);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(str(where, " is malformed: ", e.what()));
  }
  for (const DatasetSplit* s : {&d.train, &d.val}) {
    int64_t sum = 0;
    for (const std::string& p : s->shards) sum += read_token_shard_header(p);
    MT_REQUIRE(sum == s->tokens, "dataset ", dir_in, ": its shards hold ", sum,
               " tokens but the manifest records ", s->tokens, " (a shard was replaced?)");
  }
  return d;
}

Dataset prepare_dataset(const PrepareOptions& o,
                        const std::function<void(const PrepareProgress&)>& progress) {
  check_options(o);
  const DocumentRule rule = parse_document_rule(o.documents);
  int skipped = 0;
  std::vector<CorpusSource> sources = list_corpus_sources(o.inputs, o.skip_binary, &skipped);
  // A given model is checked before anything is read or written.
  if (!is_builtin_kind(o.tokenizer)) load_sentencepiece_tokenizer(o.tokenizer);

  // The dataset's parent may not exist yet (data/ in a fresh checkout).
  const fs::path parent = fs::absolute(o.out).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw RuntimeError(str("cannot create ", parent.string(), ": ", ec.message()));
  publish_dir_atomic(o.out, [&](const std::string& tmp) {
    DocumentReader reader(sources, rule, o.separator);
    auto report = [&](const char* phase, int64_t docs, int64_t tokens) {
      if (progress) progress({phase, reader.bytes_read(), reader.total_bytes(), docs, tokens});
    };
    // Documents read to train the tokenizer are kept and encoded first.
    std::vector<std::string> sample;
    std::unique_ptr<Tokenizer> tok;
    TokenizerRecord record;
    const std::string model_path = tmp + "/" + kModelName;
    if (o.tokenizer == "byte") {
      tok = make_byte_tokenizer();
    } else {
      if (is_builtin_kind(o.tokenizer)) {
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
          sentencepiece_training_sentences(d,
                                           [&](std::string_view s) { sentences.emplace_back(s); });
        MT_REQUIRE(!sentences.empty(), "the corpus holds no text SentencePiece can train on");
        size_t next = 0;
        SentencePieceTraining t;
        t.kind = o.tokenizer;
        t.vocab_size = o.vocab_size;
        t.threads = o.threads;
        train_sentencepiece(
            t,
            [&](std::string& s) {
              if (next == sentences.size()) return false;
              s = std::move(sentences[next++]);
              return true;
            },
            model_path);
      } else {
        fs::copy_file(o.tokenizer, model_path);
      }
      tok = load_sentencepiece_tokenizer(model_path);
      record = record_tokenizer_file(tok->kind(), model_path);
    }
    record.kind = tok->kind();

    const std::string marker = end_marker(rule, o.separator);
    const std::vector<int> end_ids = tok->encode(marker);
    SplitWriter train(tmp, "train", o.shard_tokens);
    std::unique_ptr<SplitWriter> val;
    if (o.val_fraction > 0) val = std::make_unique<SplitWriter>(tmp, "val", o.shard_tokens);
    uint64_t index = 0, content_bytes = 0;
    auto add = [&](const std::string& doc, const std::vector<int>& ids) {
      SplitWriter& w = val && is_validation_document(index, o.seed, o.val_fraction) ? *val : train;
      w.add_document(ids, end_ids, doc.size() + marker.size());
      content_bytes += doc.size();
      if (++index % 1024 == 0)
        report("encoding", int64_t(index), train.tokens() + (val ? val->tokens() : 0));
    };
    // SentencePiece encodes on one thread: documents go in batches of about 4 MB to
    // --threads threads (encode is const), and are written in input order, so the output
    // does not depend on the thread count. Bytes need no help.
    const size_t threads = tok->kind() == "byte" ? 1 : size_t(std::max(1, o.threads));
    std::vector<std::string> batch;
    std::vector<std::vector<int>> batch_ids;
    size_t batch_bytes = 0;
    auto flush = [&] {
      batch_ids.resize(batch.size());
      std::vector<std::exception_ptr> errors(threads);
      auto work = [&](size_t t) {
        try {
          for (size_t i = t; i < batch.size(); i += threads) {
            batch_ids[i].clear();
            tok->encode(batch[i], batch_ids[i]);
          }
        } catch (...) {
          errors[t] = std::current_exception();
        }
      };
      std::vector<std::thread> pool;
      for (size_t t = 1; t < threads; ++t) pool.emplace_back(work, t);
      work(0);
      for (std::thread& th : pool) th.join();
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
        tok->encode(doc, ids);
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
    MT_REQUIRE(content_bytes > 0, "the corpus is empty (", index,
               " documents, 0 bytes of text): nothing to prepare");
    MT_REQUIRE(train.documents() > 0, "no document went to training (", index,
               " documents, --val-fraction ", o.val_fraction, ")");
    MT_REQUIRE(!val || val->documents() > 0, "none of the ", index,
               " documents went to validation with --val-fraction ", o.val_fraction, " and --seed ",
               o.seed,
               "; give more documents (see --documents) or a larger "
               "fraction, or --val-fraction 0");
    train.finish();
    if (val) val->finish();

    nlohmann::json tj = to_json(record);
    if (tj.contains("file")) tj["file"] = kModelName;  // relative: the dataset can move
    nlohmann::json m = {{"meshtrain_dataset", kDatasetFormat},
                        {"tokenizer", tj},
                        {"vocab_size", tok->vocab_size()},
                        {"documents", document_rule_name(rule)},
                        {"end_marker", marker},
                        {"seed", o.seed},
                        {"val_fraction", o.val_fraction},
                        {"shard_tokens", o.shard_tokens},
                        {"input_bytes", reader.bytes_read()},
                        {"train", split_json(train, "train")}};
    if (rule == DocumentRule::separator) m["separator"] = o.separator;
    if (val) m["val"] = split_json(*val, "val");
    std::ofstream out(tmp + "/" + kManifest);
    out << m.dump(2) << "\n";
    out.close();
    MT_CHECK(out, "cannot write ", tmp, "/", kManifest);
  });
  Dataset d = read_dataset(o.out);
  d.skipped_binary = skipped;
  return d;
}

}  // namespace mt
