// A --save directory of sharded checkpoints: DIR/step_NNNNNN (complete: renamed into place
// after its manifest was written), DIR/step_NNNNNN.tmp (a save in progress, or one a crash
// interrupted: never loaded; marked as meshtrain's and removed by the next run that saves
// there) and DIR/checkpoint_log.json (which run wrote which step folder: checkpoint_log.h).
// Finding the newest good checkpoint (--resume auto), verifying one (--load, `meshtrain
// checkpoint verify`), and the directory operations retention (retention.h) deletes with.
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
// size, every block matching its checksum, and every tensor its model needs listed at its
// shape (checkpoint_contents.h). Throws UsageError naming file and tensor.
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

// True when `dir` is a directory holding a meshtrain manifest and nothing but checkpoint
// files (rank_RRRRR.bin, manifest.json, an inert marker): what a save or retention may
// replace or delete, if the run wrote it (retention.h).
bool is_meshtrain_checkpoint_dir(const std::string& dir);
bool holds_only_checkpoint_files(const std::string& dir);

// Makes `tmp` (step_NNNNNN.tmp) a fresh, marked temporary (core/temp_marker.h): a marked
// leftover there is removed first; anything else there throws RuntimeError (it is not ours).
void prepare_step_temp(const std::string& tmp);

// Deletes a checkpoint directory so that a crash never leaves a half checkpoint that looks
// complete: marks it, renames it to its temporary name (step_NNNNNN.tmp) and removes that.
// The caller has proved the directory is the run's. Throws RuntimeError.
void discard_step_dir(const std::string& dir);

// Removes step_NNNNNN.tmp directories under root that hold meshtrain's marker (left by
// interrupted saves and prunes; the caller holds the save lock). A directory merely named
// so stays. Returns the removed paths.
std::vector<std::string> remove_interrupted_saves(const std::string& root);

}  // namespace mt
