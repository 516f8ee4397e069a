// The manifest of a sharded checkpoint: DIR/manifest.json, written last by rank 0.
//
// A sharded checkpoint (docs/checkpoints.md) is a directory DIR/step_NNNNNN holding one
// file per writing rank (rank_RRRRR.bin: raw little-endian fp32, no header) and this
// manifest. The manifest says everything a reader needs without looking at the layout
// that wrote it: every tensor's global shape (weights, "<name>.exp_avg",
// "<name>.exp_avg_sq", and per MoE layer the router's "expert_bias"), every segment (a
// stretch of one file holding global elements of one tensor, listed as strided runs,
// shard_runs.h), every file's size and the CRC-32C of each of its 1 MiB blocks, and the
// training state (step, data position, seed, model shape, the layout that wrote it).
//
// CRC-32C rather than SHA-256: the threat is a damaged or truncated file, not a forger;
// CRC-32C catches every burst error of up to 32 bits, runs at memory speed in hardware
// (core/crc32c.h), and per-block checksums let a resharding load verify exactly the
// blocks it reads instead of whole files.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/checkpoint/shard_runs.h"

namespace mt {

constexpr int kShardedFormatVersion = 1;
inline constexpr const char* kShardedFormatName = "meshtrain-sharded";
constexpr uint64_t kShardBlockBytes = uint64_t(1) << 20;
inline constexpr const char* kManifestFile = "manifest.json";
// The AdamW moments of tensor NAME are the tensors NAME + suffix.
inline constexpr const char* kMomentSuffixes[] = {".exp_avg", ".exp_avg_sq"};

struct ManifestTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

struct ManifestFile {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  std::vector<uint32_t> block_crc32c;  // one per kShardBlockBytes block (the last may be short)
};

struct ManifestSegment {
  std::string tensor;
  int file = 0;         // index into Manifest::files
  uint64_t offset = 0;  // bytes into the file
  std::vector<StridedRun> runs;
  int64_t elements() const;
};

struct Manifest {
  int step = 0;
  int64_t data_position = 0;
  uint64_t seed = 0;
  ModelConfig model;
  std::string layout;  // what wrote it, e.g. "dp 4 zero 3 tp 2 pp 2 ep 1" (for people)
  // Entries that travel with the weights into an export, as in a safetensors header: the
  // tokenizer record (train/tokenizer.h), so a sharded --load is checked against the data.
  std::map<std::string, std::string> metadata;
  // The run's resolved configuration (TrainOptions::run_config), null when not recorded.
  nlohmann::json run;
  std::vector<ManifestTensor> tensors;
  std::vector<ManifestFile> files;
  std::vector<ManifestSegment> segments;
};

// The manifest as written, sealed with its checksum (metadata_checksum.h).
nlohmann::json manifest_json(const Manifest& m);
// Parses and checks DIR/manifest.json (manifest_reader.cpp): its checksum, well-formed,
// every integer in range with overflow-checked arithmetic before anything is allocated from
// it, the step equal to the folder's (step_NNNNNN), every file present at its recorded size,
// every segment inside its file (not overlapping another) and its tensor, and every element
// of every tensor stored exactly once. A manifest without a checksum (written before
// metadata checksums) is refused. Throws UsageError naming the file and, where there is
// one, the tensor.
Manifest read_manifest(const std::string& dir);
// The coverage check alone (read_manifest runs it; the writer runs it before publishing).
void check_manifest_coverage(const Manifest& m, const std::string& where);
// Whether the run's intervals lie in 0..numel without overflow (and do not overlap).
bool run_within(const StridedRun& r, int64_t numel);
// "tensor X (and N more)": the tensors with bytes in [lo, hi) of file `file`, for messages.
std::string tensors_in(const Manifest& m, int file, uint64_t lo, uint64_t hi);

// The model shape as the manifest records it, and the check that a run's model is the
// one a checkpoint holds (UsageError naming the first field that differs).
nlohmann::json model_json(const ModelConfig& c);
void require_same_model(const Manifest& m, const ModelConfig& run, const std::string& where);

}  // namespace mt
