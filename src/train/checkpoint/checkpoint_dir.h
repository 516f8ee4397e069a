// A --save directory of sharded checkpoints: DIR/step_NNNNNN (complete: renamed into place
// after its manifest was written) and DIR/step_NNNNNN.tmp (a save in progress, or one a
// crash interrupted: never loaded, removed by the next run that saves there). Finding the
// newest good checkpoint (--resume auto), pruning old ones (--keep-checkpoints) and
// verifying one (--load, `meshtrain checkpoint verify`).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "train/checkpoint/manifest.h"

namespace mt {

// "step_000100"
std::string step_dir_name(int step);
// The step of "step_NNNNNN" (tmp false) or "step_NNNNNN.tmp" (tmp true); -1 for any other name.
int parse_step_dir_name(const std::string& name, bool* tmp);

// True when `dir` holds a sharded checkpoint's manifest (the global format has state.json).
bool is_sharded_checkpoint(const std::string& dir);

// Full check of one sharded checkpoint without loading it: not under a temporary name,
// manifest well-formed and covering every tensor, every shard present, of its recorded
// size, every block matching its checksum. Throws UsageError naming file and tensor.
struct ShardedVerification {
  Manifest manifest;
  uint64_t bytes_verified = 0;
};
ShardedVerification verify_sharded_checkpoint(const std::string& dir);

// Complete checkpoint directories under root (no temporaries), newest step first.
std::vector<std::string> complete_checkpoints(const std::string& root);

// --resume auto: the newest checkpoint under root that verifies; a damaged one is skipped
// with warn("skipping DIR: why"). "" when there is none (the run starts fresh).
std::string newest_valid_checkpoint(const std::string& root,
                                    const std::function<void(const std::string&)>& warn);

// Deletes all but the `keep` newest complete checkpoints under root (keep >= 1; the
// newest is never deleted). Only directories holding a meshtrain manifest are touched:
// a user's directory that merely has a checkpoint-like name stays. Each is renamed to its
// temporary name first, so a crash mid-delete never leaves a half checkpoint that looks
// complete. Returns the deleted paths.
std::vector<std::string> prune_checkpoints(const std::string& root, int keep);

// Removes step_NNNNNN.tmp directories under root that hold nothing but shard files and a
// manifest (left by interrupted saves; the caller holds the save lock). Returns them.
std::vector<std::string> remove_interrupted_saves(const std::string& root);

}  // namespace mt
