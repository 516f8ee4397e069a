// What a load takes from a checkpoint, checked without loading it, so that `checkpoint
// verify` (and the check --load runs before any rank starts) passing means the load will
// not refuse the files. Checksums prove the bytes are the ones written; these checks prove
// what was written is what a load of the recorded model reads: every tensor of the model,
// both AdamW moments of each and (MoE) the routers' biases, present at the model's global
// shape. A checkpoint can fail here with every checksum intact: a manifest that lists a
// tensor short, or a writer that left one out, sealed its mistake with a valid checksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/checkpoint/manifest.h"

namespace mt {

struct CheckpointTensor {
  enum class Kind { weight, moment, router_bias };
  std::string name;
  std::vector<int64_t> shape;  // global
  Kind kind = Kind::weight;
};

// Every tensor a resumed run of `model` reads, in the whole model's table order: each
// weight, then its moments ("<name>.exp_avg", "<name>.exp_avg_sq"); then per MoE layer the
// router's selection bias [experts].
std::vector<CheckpointTensor> checkpoint_tensors(const ModelConfig& model);

// A sharded checkpoint's manifest against its own model: every tensor of
// checkpoint_tensors(m.model) listed at its shape (coverage of the listed ones is
// read_manifest's). Throws UsageError naming the manifest and the tensor.
void check_manifest_contents(const Manifest& m, const std::string& where);

// A global checkpoint's two files against the model state.json records: both headers
// well-formed, the model the tensors describe the one recorded (a llama model's tie from
// the files' "tie_embeddings", so an untied model's missing lm_head.weight is refused), and
// every tensor at its shape (the routers' biases, which checkpoints before them lack, when
// present). Throws UsageError naming the file and the tensor. Returns the tensors it could
// not check, each with why (lm_head.weight of a llama checkpoint older than the record).
std::vector<std::string> check_global_contents(const std::string& dir, const nlohmann::json& state,
                                               const std::string& where);

// The first NaN or Inf among a file's fp32 values (its bytes from `first` on: a shard's
// all, a safetensors file's data section), fed the bytes in order as they are read for the
// checksum, so the check costs no second read. A load refuses a non-finite value (a diverged
// run's state), and the checksums of a file written that way all match.
class NonFiniteScan {
 public:
  explicit NonFiniteScan(uint64_t first = 0) : first_(first) {}
  // Bytes [at, at + n) of the file; calls come in file order.
  void feed(const char* bytes, size_t n, uint64_t at);
  // The file offset of the first non-finite value; nullopt when there is none so far.
  std::optional<uint64_t> found() const { return found_; }

 private:
  uint64_t first_;
  char carry_[4] = {};  // a value split across two feeds
  size_t carried_ = 0;
  std::optional<uint64_t> found_;
};

// Throws UsageError naming the tensor and element of safetensors file `path` at file offset
// `at` (NonFiniteScan's find, its data section starting at `data_start`).
[[noreturn]] void refuse_non_finite(const std::string& path, uint64_t data_start, uint64_t at);

}  // namespace mt
