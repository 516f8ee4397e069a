#include "train/session_io.h"

#include <algorithm>

#include "core/error.h"
#include "model/sampler.h"
#include "train/hf_export.h"
#include "train/tokenizer.h"

namespace mt {

namespace {

// model: a whole, unsharded model (one worker's layout).
void print_sample(GPT& model, const TrainOptions& o,
                  const std::function<void(const std::string&)>& line) {
  // The data's tokenizer (checked before the run started), else bytes for a byte vocabulary.
  const std::unique_ptr<Tokenizer> tok = tokenizer_for(o.io.tokenizer, model.config().vocab);
  if (!tok) {
    line("(sample skipped: the data's tokenizer is unknown and the vocabulary is not byte-level)");
    return;
  }
  SampleOptions so;
  so.tokens = o.io.sample_tokens;
  so.seed = o.optim.seed;
  so.vocab = tok->vocab_size();  // rows past the tokenizer's pieces cannot be decoded
  auto prompt = tok->encode(o.io.sample_prompt);
  auto out = sample(model, prompt, so);
  std::vector<int> generated(out.begin() + long(prompt.size()), out.end());
  line("---- sample (" + std::to_string(so.tokens) + " tokens, " + tok->kind() +
       " tokenizer, temperature 0.8) ----");
  line(o.io.sample_prompt + tok->decode(generated));
  line("----");
}

// Sampling wants whole logit rows and every block: a whole model from rank 0's global view.
void sample_on_whole_copy(Session& s, const GlobalTensors& global,
                          const std::vector<NamedTensor>& biases,
                          const std::function<void(const std::string&)>& line) {
  const ModelConfig& cfg = s.opts.model;
  GPT whole(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  for (size_t i = 0; i < global.size(); ++i) {
    const ParamInfo& p = whole.table().entries()[i];
    MT_CHECK(p.name == s.view->whole().entries()[i].name, "tables differ at ", p.name);
    std::copy(global[i].begin(), global[i].end(), whole.params().data() + p.offset);
  }
  const std::vector<MoeLayer*> whole_moe = whole.moe_layers();
  for (size_t i = 0; i < biases.size(); ++i) whole_moe[i]->router_bias() = biases[i].data;
  print_sample(whole, s.opts, line);
}

}  // namespace

void write_final_outputs(Session& s, const std::function<void(const std::string&)>& line) {
  const TrainOptions& o = s.opts;
  s.moe_metrics.set_recording(false);  // sampling forwards are not training's routing
  // Export and sampling read the model's own arenas: gather the global weights into them.
  s.dp.restore_model();
  const bool sample_now = o.io.sample_tokens > 0;
  // Rank 0's own model is whole only without tp, pp and ep; otherwise sample on a copy.
  const bool sample_copy = sample_now && (s.tp() || s.pipelined() || o.parallel.ep > 1);
  const bool exports = !o.io.export_path.empty() || !o.io.export_hf.empty();
  if (exports || sample_copy) {
    const GlobalTensors global = s.view->gather(s.model.table(), s.model.params().data(), s.tp());
    // They steer expert selection: the sample needs them, and a llama export holds them
    // (weights_file.h, exported_router_biases). Collective: every rank decides alike.
    const bool export_biases = exports && o.model.llama() && o.model.experts > 0;
    std::vector<NamedTensor> biases;
    if (sample_copy || export_biases) biases = s.view->router_biases_to_lead();
    const bool bf16 = o.io.export_dtype == Precision::bf16;
    const std::vector<NamedTensor> exported = exported_router_biases(o.model, biases);
    if (s.lead() && !o.io.export_path.empty())
      export_weights(o.io.export_path, s.view->whole(), o.model, global, bf16,
                     tokenizer_metadata(o.io.tokenizer), exported);
    if (s.lead() && !o.io.export_hf.empty())
      export_hf_directory(o.io.export_hf, s.view->whole(), o.model, global, bf16, o.io.tokenizer,
                          exported);
    if (s.lead() && sample_copy) sample_on_whole_copy(s, global, biases, line);
  }
  if (s.lead() && sample_now && !sample_copy) print_sample(s.model, o, line);
}

}  // namespace mt
