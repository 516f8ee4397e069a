// `meshtrain sample`: generate text from a checkpoint or a weights file.
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>

#include "cli/commands.h"
#include "cli/flag_set.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/threads.h"
#include "data/sentencepiece_tokenizer.h"
#include "model/gpt.h"
#include "model/sampler.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_location.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/consolidate.h"
#include "train/checkpoint/global_checkpoint.h"
#include "train/checkpoint/manifest.h"
#include "train/hf_directory.h"
#include "train/tokenizer.h"

namespace mt {

namespace {

struct SampleArgs {
  std::string load, init_from, prompt = "\n";
  std::string tokenizer;  // a .model file standing in for the recorded one (it moved)
  int tokens = 200, threads = 1, top_k = 0;
  int experts_topk = 0;  // experts per token of a mixture-of-experts model (0 = the file's)
  float temperature = 0.8f;
  uint64_t seed = 1337;
};

// The tokenizer the weights were trained with (its record in the file's metadata, a Hugging
// Face directory's tokenizer.model), or --tokenizer standing in for it.
std::unique_ptr<Tokenizer> sample_tokenizer(const SampleArgs& a, const std::string& weights,
                                            std::optional<TokenizerRecord> record, int vocab) {
  const bool hf = is_hf_directory(weights);
  if (hf && !record && !a.tokenizer.empty()) {
    // A Hugging Face directory without tokenizer.model: the user names the model file.
    const std::string kind = load_sentencepiece_tokenizer(a.tokenizer, "--tokenizer")->kind();
    record = record_tokenizer_file(kind, a.tokenizer, "--tokenizer");
  } else if (!a.tokenizer.empty()) {
    MT_REQUIRE(record, weights,
               " records no tokenizer; --tokenizer can only stand in for a "
               "recorded one");
    // The byte tokenizer has no file: a --tokenizer was ignored, even one that did not exist.
    MT_REQUIRE(record->kind != "byte", "--tokenizer ", a.tokenizer, " would be ignored: ", weights,
               " was trained with the byte tokenizer (256 ids, one per byte), which has no model "
               "file; drop --tokenizer");
    const TokenizerRecord given = record_tokenizer_file(record->kind, a.tokenizer, "--tokenizer");
    MT_REQUIRE(same_tokenizer(given, *record), "--tokenizer ", a.tokenizer, " is not the one ",
               weights, " was trained with (", record->describe(), "): its CRC-32C differs");
    record = given;
  }
  std::unique_ptr<Tokenizer> tok = tokenizer_for(record, vocab);
  MT_REQUIRE(tok, weights, " has a vocabulary of ", vocab,
             hf ? " and no tokenizer.model; give the SentencePiece model with --tokenizer FILE"
                : " and records no tokenizer; sample decodes byte-level (256) models and models "
                  "trained on a dataset of meshtrain prepare");
  MT_REQUIRE(tok->vocab_size() <= vocab, "the tokenizer of ", weights, " has ", tok->vocab_size(),
             " pieces but the model only ", vocab, " rows");
  return tok;
}

// --topk N (experts per token) over the file's; the model's config validated. --topk routes
// tokens to experts: on a dense model it would change nothing, so it is refused there rather
// than ignored (--top-k N is the sampling option).
void apply_experts_topk(const SampleArgs& a, ModelConfig& cfg, const std::string& weights) {
  MT_REQUIRE(a.experts_topk == 0 || cfg.experts > 0, "--topk ", a.experts_topk,
             " sets the experts per token of a mixture-of-experts model, but ", weights,
             " holds a dense model (no experts): drop --topk (--top-k N samples among the N "
             "most likely tokens)");
  if (a.experts_topk > 0) cfg.topk = a.experts_topk;
  cfg.validate();
}

// The model to sample from, its weights loaded: from --init-from (a weights file or a Hugging
// Face directory) or --load (a checkpoint, global or sharded: checkpoint_location.h).
struct SampleModel {
  std::unique_ptr<GPT> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// A sharded checkpoint: its whole model gathered from the shards (train/checkpoint/
// consolidate.h), as export --from reads it.
SampleModel load_sharded(const SampleArgs& a, const std::string& dir) {
  const CheckpointWeights c = read_checkpoint_weights(dir, "--load");
  ModelConfig cfg = c.model;
  const std::string where = dir + "/" + kManifestFile;
  apply_experts_topk(a, cfg, dir);
  SampleModel m;
  m.tokenizer = sample_tokenizer(a, where, metadata_tokenizer(c.metadata, where), cfg.vocab);
  set_compute_threads(a.threads);
  m.model = std::make_unique<GPT>(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  float* params = m.model->params().data();
  for (size_t i = 0; i < c.table.entries().size(); ++i) {
    const ParamInfo* p = m.model->table().find(c.table.entries()[i].name);
    MT_CHECK(p != nullptr, "tensor ", c.table.entries()[i].name, " of the whole model");
    const std::vector<float>& w = c.weights[i];
    p->for_each_element(
        [&](size_t local, int64_t global) { params[p->offset + local] = w[size_t(global)]; });
  }
  // They steer expert selection as they did in training (MoeRouter::selects_with_bias).
  const std::vector<MoeLayer*> moe = m.model->moe_layers();
  MT_CHECK(moe.size() == c.router_biases.size(), "routers vs MoE layers");
  for (size_t i = 0; i < moe.size(); ++i) moe[i]->router_bias() = c.router_biases[i].data;
  return m;
}

SampleModel load_file(const SampleArgs& a, const std::string& load) {
  const std::string weights = load.empty() ? a.init_from : load + "/model.safetensors";
  ModelConfig base;
  base.topk = a.experts_topk;
  ModelConfig cfg = model_config_from_file(weights, base);
  // The biases a checkpoint holds steer expert selection; a layer adds them only when
  // bias updates are on (any positive rate: sampling never updates them). Zero biases
  // select as no biases would.
  if (cfg.experts > 0 && !load.empty()) cfg.router_bias_update = 1;
  apply_experts_topk(a, cfg, load.empty() ? weights : load);
  SampleModel m;
  m.tokenizer = sample_tokenizer(a, weights, weights_tokenizer(weights), cfg.vocab);
  set_compute_threads(a.threads);
  m.model = std::make_unique<GPT>(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  import_weights(weights, *m.model);
  if (!load.empty())
    load_router_biases(load, m.model->table(), m.model->moe_layers());
  else
    import_router_biases(weights, m.model->moe_layers(), cfg);
  return m;
}

int run_sample(const SampleArgs& a) {
  MT_REQUIRE(a.load.empty() != a.init_from.empty(),
             "give exactly one of --load DIR or --init-from FILE|HF_DIR");
  MT_REQUIRE(a.tokens >= 0, "--tokens must be >= 0");
  MT_REQUIRE(std::isfinite(a.temperature) && a.temperature >= 0,
             "--temperature must be a finite number >= 0 (0 = greedy; got ", a.temperature, ")");
  MT_REQUIRE(a.top_k >= 0, "--top-k must be >= 0 (0 = all tokens)");
  MT_REQUIRE(a.experts_topk >= 0, "--topk must be >= 0 (0 = from the file)");
  require_thread_count("--threads", a.threads);
  // The inputs are checked as train checks them: regular files, a checkpoint verified.
  if (a.load.empty() && is_hf_directory(a.init_from))
    for (const std::string& f : hf_input_files(a.init_from)) require_input_file("--init-from", f);
  else if (a.load.empty())
    require_input_file("--init-from", a.init_from);
  const std::string load = a.load.empty() ? "" : resolve_checkpoint_dir("--load", a.load);
  const bool sharded = !load.empty() && loads_sharded(load);
  if (!load.empty() && !sharded) verify_checkpoint(load);
  const SampleModel m = sharded ? load_sharded(a, load) : load_file(a, load);
  SampleOptions so;
  so.tokens = a.tokens;
  so.temperature = a.temperature;
  so.top_k = a.top_k;
  so.seed = a.seed;
  so.vocab =
      m.tokenizer->vocab_size();  // rows past the tokenizer's pieces (padding) cannot be decoded
  std::fputs(a.prompt.c_str(), stdout);
  sample(*m.model, m.tokenizer->encode(a.prompt), so, [&](int t) {
    const std::string text = m.tokenizer->decode(std::span<const int>(&t, 1));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace

CommandRunner add_sample_command(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand("sample", "generate text from trained weights");
  cmd->add_option("--load", a->load,
                  "checkpoint written by train --save: a global one, a sharded step folder, or "
                  "a run folder (its newest complete step)");
  cmd->add_option("--init-from", a->init_from,
                  "weights file (safetensors) e.g. from --export, or a Hugging Face Llama "
                  "directory (config.json + safetensors) e.g. from --export-hf");
  cmd->add_option("--prompt", a->prompt, "text to continue")->capture_default_str();
  cmd->add_option("--tokens", a->tokens, "tokens to generate")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "softmax temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "sample among the k most likely tokens (0 = all)")
      ->capture_default_str();
  cmd->add_option("--topk", a->experts_topk,
                  "experts per token of a mixture-of-experts model (0 = from the file)")
      ->capture_default_str();
  add_checked_uint(*cmd, "--seed", &a->seed, "sampling seed", kSeedRange);
  cmd->add_option("--tokenizer", a->tokenizer,
                  "the tokenizer .model file, when the one the weights record has moved (or a "
                  "Hugging Face directory has none)");
  cmd->add_option("--threads", a->threads, "compute threads")->capture_default_str();
  return [a] { return run_sample(*a); };
}

}  // namespace mt
