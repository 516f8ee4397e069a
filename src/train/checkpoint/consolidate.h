// `meshtrain export --from CHECKPOINT_DIR --to FILE.safetensors`: the weights of a sharded
// checkpoint as the single nanoGPT-named file (weights_file.h) that moves to PyTorch, built
// offline from the shards, tensor by tensor through the manifest. `--to-hf DIR`: the weights
// of a sharded or global checkpoint as a Hugging Face Llama directory (train/hf_export.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "model/config.h"
#include "model/param_table.h"
#include "train/weights_file.h"

namespace mt {

struct ConsolidateReport {
  int step = 0;
  int64_t tensors = 0;
  uint64_t bytes_verified = 0;
};

// The whole model's weights a checkpoint holds (a sharded step folder or a global
// checkpoint: checkpoint_location.h), verified and every value finite: what export writes
// and sample generates from. `flag` names the command's argument in errors.
struct CheckpointWeights {
  ModelConfig model;
  ParamTable table;  // whole_model_table(model)
  GlobalTensors weights;
  std::map<std::string, std::string> metadata;  // the tokenizer record travels here
  ConsolidateReport report;
  // Every MoE layer's router selection bias (router_bias_names(table) order, the order of
  // GPT::moe_layers), zeros where the checkpoint holds none: they steer expert selection,
  // so whatever samples from or exports the weights needs them too.
  std::vector<NamedTensor> router_biases;
};
CheckpointWeights read_checkpoint_weights(const std::string& dir, const std::string& flag);

// Verifies the whole checkpoint (sharded or global) first, refuses an output that is a file
// of the checkpoint, then writes `out` atomically. UsageError for bad input.
// as_bf16: the weights in BF16 (--export-dtype bf16). A llama MoE's selection biases go with
// them (exported_router_biases), as train --export writes them.
ConsolidateReport export_sharded_checkpoint(const std::string& dir, const std::string& out,
                                            bool as_bf16 = false);

// Verifies the checkpoint (sharded or global) and every value finite, refuses an output
// directory that overlaps it or holds anything but an export, then publishes `out` whole.
// as_bf16: the weights in BF16. UsageError for bad input or a model a Hugging Face Llama
// directory cannot describe (gpt2). A llama MoE's selection biases go with the weights
// (model.layers.{i}.mlp.gate.e_score_correction_bias), as train --export-hf writes them.
ConsolidateReport export_checkpoint_to_hf(const std::string& dir, const std::string& out,
                                          bool as_bf16);

}  // namespace mt
