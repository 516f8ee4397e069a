// A planner candidate (one setting of every layout knob) and the request it answers; the
// bridge to `meshtrain train`'s options, so that a candidate is valid exactly when train
// would accept it (train/validate_options.h is the one set of rules).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "plan/hardware_profile.h"
#include "plan/layout_names.h"
#include "plan/modern_attention.h"
#include "train/options.h"

namespace mt::plan {

struct Layout {
  int dp = 1, tp = 1, pp = 1, virtual_stages = 1, ep = 1, zero = 0;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  int micro_batch = 1;  // sequences per microbatch (train's --microbatches = batch/(dp*this))
  std::string schedule = "1f1b";
  Precision precision = Precision::fp32;
  // Context parallelism (docs/contracts.md §11): each sequence cut over cp ranks (zigzag), the
  // K/V passed around a ring ("ring") or all-gathered once per layer ("allgather"). GPU
  // software that has it, and this engine (llama block).
  int cp = 1;
  CpComm cp_comm = CpComm::ring;
  int world() const { return dp * cp * tp * pp; }
  // Ranks holding the same weights (of one tp rank and stage): gradients are reduced and
  // ZeRO shards over them.
  int data_ranks() const { return dp * cp; }
  // Sequences per optimizer step on one dp replica (64-bit: dp and micro_batch are each an int).
  int64_t per_replica() const { return int64_t(dp) * micro_batch; }
  bool operator==(const Layout&) const = default;
};

// --bucket-mb's largest value: 1 TiB buckets, whose float count stays far inside int64.
constexpr double kMaxBucketMb = 1 << 20;
// --mtp-layers' largest value (DeepSeek-V3 trains with 1).
constexpr int kMaxMtpLayers = 64;

// What the user asked for: the model, the global batch, the machine, and the knobs they
// fixed (unset = searched).
struct PlanRequest {
  ModelConfig model;
  int batch = 8;  // global batch, sequences
  HardwareProfile hardware;
  int devices = 1;                // --gpus (GPU presets) or --ranks (local)
  int threads = 1;                // compute threads per rank (local)
  std::string backend = "local";  // local hardware: the backend the run will use
  double bucket_mb = 25;
  // Multi-token-prediction modules (DeepSeek-V3's MTP, depth D; plan --mtp-layers): each one
  // block like the model's last, a 2h -> h projection and a second pass of the (shared)
  // output head and loss, on the chunk with the head. GPU software with paper memory only:
  // the engine has no MTP.
  int mtp_layers = 0;
  // The attention family (plan --attention): MHA as the engine's blocks, or DeepSeek's MLA
  // (modern_attention.h; GPU software with paper memory and --arch llama only: the engine
  // has no MLA).
  AttentionShape attention;
  std::optional<int> dp, tp, pp, virtual_stages, ep, zero, micro_batch, cp;
  std::optional<bool> sequence_parallel;
  std::optional<Recompute> recompute;
  std::optional<Precision> precision;
  std::optional<CpComm> cp_comm;
  // The schedule IR's own name (make_schedule's key, train's --schedule).
  std::optional<std::string> schedule;
  std::optional<int> microbatches;  // train's --microbatches (auto-layout), a filter
};

// The model as this engine's rules see it: on GPU presets the vocabulary is the GPU
// software's (int32 token ids, to 2^31 - 1: Llama 3's 128,256 or a 256K vocabulary), not
// the shard format this engine reads, so its size is checked alone and the model's other
// rules on a copy within the engine's vocabulary.
ModelConfig with_engine_vocab(const PlanRequest& r);

// UsageError (one line naming the flag) unless every number of the request is within the
// range the planner can plan: the model's own rules (with_engine_vocab), --dim at most 2^29 - 1
// (the MLP's width, 4 x dim, is an int), --batch and the device count >= 1, --threads as train
// takes it, --bucket-mb finite in (0, 2^20] MiB, the fixed knobs >= 1, --zero 0-3.
void validate_request(const PlanRequest& r);

// UsageError (one line naming the flag) unless --attention mla's widths are in range and the
// request can plan it: GPU software with paper memory, --arch llama, no --kv-heads or
// --head-dim of its own.
void validate_mla_request(const PlanRequest& r);

// train's --microbatches of a candidate: batch / (dp x micro_batch), 0 when that is below 1.
int microbatches(const PlanRequest& r, const Layout& l);

// The `meshtrain train` options of a candidate (model, batch, layout; --backend mpi on GPU
// presets, where the world is not limited to one process's threads).
TrainOptions train_options(const PlanRequest& r, const Layout& l);

// resolve_stage_layers(m, pp, v, "") (train's default partition), memoised.
const std::vector<int>& default_stage_layers(const ModelConfig& m, int pp, int virtual_stages);

// UsageError (one line naming the flag) unless the candidate is a layout train accepts for
// this model and batch and the precision is one the planner can model on this hardware.
void validate_candidate(const PlanRequest& r, const Layout& l);

// The `meshtrain train` command line for a candidate.
std::string train_command(const PlanRequest& r, const Layout& l);

}  // namespace mt::plan
