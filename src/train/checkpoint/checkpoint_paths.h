// The checkpoint directories a run names, checked before any rank starts (docs/checkpoints.md,
// "What a run refuses"), whatever the format: --load DIR holds a checkpoint that verifies,
// --save DIR may be written (nothing but checkpoints in the way, no other output inside a
// directory a save replaces, no step folder another run owns), and --resume auto finds the
// newest good checkpoint under --save. The format of --load is read from the directory; that
// of --save is --checkpoint-format.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "train/options.h"

namespace mt {

// --load DIR names a sharded checkpoint (a manifest, or a step_NNNNNN[.tmp] name: the
// sharded checks then say what is wrong with it).
bool loads_sharded(const std::string& dir);

// The step of the checkpoint in `dir`, from its metadata (either format).
int checkpoint_step(const std::string& dir);
// The run's resolved configuration the checkpoint in `dir` records (either format; null
// for one written before it was recorded).
nlohmann::json recorded_run_config(const std::string& dir);

// Resolves --save to the directory it names (through symlinks), so that the atomic swap
// replaces that directory rather than failing on the link after the run.
void resolve_save_path(IoOptions& io);

// The files a load of `dir` reads (inputs no output may overwrite).
std::vector<std::string> checkpoint_files(const std::string& dir);

// Every byte of --load DIR against its checksums (both formats). Throws UsageError naming
// the file.
struct LoadVerification {
  bool verified = false;  // checksums present and matching
  uint64_t bytes_verified = 0;
};
LoadVerification verify_load(const std::string& dir);

// A checkpoint that records its model (the sharded manifest) must hold this one: found
// here, before any rank. No-op for a global checkpoint (its tensors are checked as they
// load).
void check_load_fits(const std::string& dir, const ModelConfig& model);

// --save DIR may take this run's saves. outputs: the run's other outputs (flag, path), none
// of which may lie inside a directory a save replaces. Throws UsageError.
void check_save_dir(const TrainOptions& o,
                    const std::vector<std::pair<std::string, std::string>>& outputs);

// Before the first save: sharded saves write step folders into --save DIR, which must then
// exist (checked writable before). Throws UsageError.
void prepare_save_root(const IoOptions& io);

// The newest complete checkpoint under --save that verifies ("" when none): --resume auto
// and the restarts of --max-restarts. A damaged one is skipped with warn(why).
std::string newest_checkpoint(const IoOptions& io,
                              const std::function<void(const std::string&)>& warn);

}  // namespace mt
