// The global checkpoint format (--checkpoint-format global, the default): training state
// in one directory, always in the global view (docs/contracts.md §4), so a checkpoint never
// depends on the parallel layout that wrote it and any layout can load it. (Single weights
// files, --export and --init-from, are weights_file.h's; the sharded format is
// sharded_checkpointer.h's.)
//
//   --save DIR / --load DIR          : resumable state, published atomically:
//       DIR/model.safetensors      weights
//       DIR/optimizer.safetensors  "<name>.exp_avg", "<name>.exp_avg_sq", and per MoE layer
//                                  "transformer.h.{i}.mlp.router.expert_bias" [E]
//       DIR/state.json             step, data position, seed, model config, the run's
//                                  resolved config ("run"), format, the size and
//                                  CRC-32C of both files, and its own checksum
// Both safetensors files carry the model config as metadata (layers, dim, heads, seq, vocab;
// experts, topk, moe_every, capacity_factor for a mixture-of-experts model); the model file
// alone carries the tokenizer record and its embedded model (train/tokenizer.h), once.
// (Checkpoints of meshtrain before this carry it in both files; the optimizer's copy is
// never read, so they load as they did.)
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/gpt.h"
#include "train/weights_file.h"

namespace mt {

struct TrainState {
  int step = 0;               // optimizer updates completed
  int64_t data_position = 0;  // loader position for the next batch
  uint64_t seed = 0;
  // The run's resolved configuration (TrainOptions::run_config), under state.json's "run"
  // and so covered by its checksum; null for a checkpoint written before it was recorded.
  nlohmann::json run = nullptr;
};

// Where load_checkpoint puts the state it reads: parameters and both AdamW moments, each a
// buffer in this rank's table layout (table().total() floats, the parameter table's
// offsets), filled with this rank's elements of the global tensors.
struct GlobalState {
  float* params = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

void save_checkpoint(const std::string& dir, const ParamTable& table, const ModelConfig& cfg,
                     const GlobalTensors& params, const GlobalTensors& exp_avg,
                     const GlobalTensors& exp_avg_sq, const TrainState& state,
                     const std::vector<NamedTensor>& optimizer_extra = {},
                     const std::map<std::string, std::string>& extra_metadata = {});
// The state.json of a checkpoint directory, every integer range-checked. Throws UsageError
// naming the field when missing, malformed or out of range. `flag` names the argument the
// directory came from in errors ("--load", "--from", "checkpoint verify").
TrainState read_train_state(const std::string& dir, const std::string& flag = "--load");

// Checks a checkpoint before anything is loaded from it: state.json well-formed and
// matching its own checksum (metadata_checksum.h), both tensor files present and regular,
// and each file's size and CRC-32C equal to what state.json recorded when it was written (a
// flipped bit fails here, not silently in training), and then what a load reads present at
// its shape (checkpoint_contents.h), so a checkpoint that verifies is one --load takes. A
// state.json without a checksum (written before metadata checksums) is refused, naming the way to
// start from its weights. Throws UsageError naming the file.
struct CheckpointVerification {
  bool verified = false;  // checksums present and matching
  uint64_t bytes_verified = 0;
  std::vector<std::string> unchecked;  // tensors the files cannot prove present, with why
};
CheckpointVerification verify_checkpoint(const std::string& dir,
                                         const std::string& flag = "--load");

// Empty when `dir` may be replaced by a save: missing, empty, or a meshtrain checkpoint
// (state.json and only checkpoint files). Otherwise one sentence naming what is in the way.
std::string checkpoint_dir_conflict(const std::string& dir);

// Validates the directory (every file present and well-formed, shapes matching this
// model, every value finite) and restores weights, moments and state. Throws UsageError
// when corrupt. Checksums are verify_checkpoint's job (once, before any rank starts).
// Loading reshards by itself: each rank takes its elements of the global tensors through
// the table's shard specs (padding rows are left as they are: zero in a fresh buffer).
TrainState load_checkpoint(const std::string& dir, const ParamTable& table, const GlobalState& g);
// Restores the router bias of every MoE layer this rank holds (moe: in table order) from
// DIR/optimizer.safetensors. A checkpoint without them (written before biases were
// saved) leaves the biases as they are (zero at the start).
void load_router_biases(const std::string& dir, const ParamTable& table,
                        const std::vector<MoeLayer*>& moe);
// Reads into `bias` (a router's E floats) the tensor `name` of DIR/optimizer.safetensors;
// false, and `bias` untouched, when the checkpoint holds none of that name.
bool read_router_bias(const std::string& dir, const std::string& name, std::vector<float>& bias);

}  // namespace mt
