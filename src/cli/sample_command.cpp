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
#include "train/checkpoint/global_checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"
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

// sample reads the global format (DIR/model.safetensors). A sharded checkpoint, or a --save
// root of them, gets the two commands that sample from it instead of "state.json is missing".
void refuse_sharded_checkpoint(const std::string& dir) {
  std::string step = dir;
  if (!is_sharded_checkpoint(dir)) {
    const std::vector<std::string> under = complete_checkpoints(dir);
    if (under.empty()) return;
    step = under.front();
  }
  MT_REQUIRE(false, "--load ", dir, " is ",
             step == dir ? "a sharded checkpoint" : "a directory of sharded checkpoints",
             "; sample reads the global format: run `meshtrain export --from ", step,
             " --to model.safetensors`, then `meshtrain sample --init-from model.safetensors`");
}

// The tokenizer the weights were trained with (its record in the file's metadata, a Hugging
// Face directory's tokenizer.model), or --tokenizer standing in for it.
std::unique_ptr<Tokenizer> sample_tokenizer(const SampleArgs& a, const std::string& weights,
                                            int vocab) {
  std::optional<TokenizerRecord> record = weights_tokenizer(weights);
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

int run_sample(const SampleArgs& a) {
  MT_REQUIRE(a.load.empty() != a.init_from.empty(),
             "give exactly one of --load DIR or --init-from FILE|HF_DIR");
  MT_REQUIRE(a.tokens >= 0, "--tokens must be >= 0");
  MT_REQUIRE(std::isfinite(a.temperature) && a.temperature >= 0,
             "--temperature must be a finite number >= 0 (0 = greedy; got ", a.temperature, ")");
  MT_REQUIRE(a.top_k >= 0, "--top-k must be >= 0 (0 = all tokens)");
  require_thread_count("--threads", a.threads);
  // The inputs are checked as train checks them: regular files, a checkpoint verified.
  if (a.load.empty() && is_hf_directory(a.init_from))
    for (const std::string& f : hf_input_files(a.init_from)) require_input_file("--init-from", f);
  else if (a.load.empty())
    require_input_file("--init-from", a.init_from);
  if (!a.load.empty()) refuse_sharded_checkpoint(a.load);
  if (!a.load.empty()) verify_checkpoint(a.load);
  const std::string weights = a.load.empty() ? a.init_from : a.load + "/model.safetensors";
  MT_REQUIRE(a.experts_topk >= 0, "--topk must be >= 0 (0 = from the file)");
  ModelConfig base;
  base.topk = a.experts_topk;
  ModelConfig cfg = model_config_from_file(weights, base);
  if (a.experts_topk > 0) cfg.topk = a.experts_topk;
  // The biases a checkpoint holds steer expert selection; a layer adds them only when
  // bias updates are on (any positive rate: sampling never updates them). Zero biases
  // select as no biases would.
  if (cfg.experts > 0 && !a.load.empty()) cfg.router_bias_update = 1;
  cfg.validate();
  const std::unique_ptr<Tokenizer> tok = sample_tokenizer(a, weights, cfg.vocab);
  set_compute_threads(a.threads);
  GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  import_weights(weights, model);
  if (!a.load.empty()) load_router_biases(a.load, model.table(), model.moe_layers());
  SampleOptions so;
  so.tokens = a.tokens;
  so.temperature = a.temperature;
  so.top_k = a.top_k;
  so.seed = a.seed;
  so.vocab = tok->vocab_size();  // rows past the tokenizer's pieces (padding) cannot be decoded
  std::fputs(a.prompt.c_str(), stdout);
  sample(model, tok->encode(a.prompt), so, [&](int t) {
    const std::string text = tok->decode(std::span<const int>(&t, 1));
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
  cmd->add_option("--load", a->load, "checkpoint directory written by train --save");
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
