// Which step folders of a --save directory (sharded checkpoints) a run may replace or delete,
// and --keep-checkpoints K: the one retention policy.
//
// A run is a line of checkpoints: a fresh start (or an explicit --load) begins a new run; a
// --resume auto (or a --max-restarts restart) continues the run of the checkpoint it resumes
// from, as the log (checkpoint_log.h) attributes it. The run may delete or replace only
// folders the log attributes to it, and among those never the checkpoint this process
// resumed from. Everything else (a user's folder, another run's checkpoint, a checkpoint
// written before the log existed) is never touched; if the run would write a step folder
// that is in the way, it says so before training (check_save_root).
//
// Retention keeps the K newest valid checkpoints of the run in the order they were
// written (the log's seq, not the step number: a run resumed from an older step writes
// lower numbers after higher ones). Valid means: the folder holds a meshtrain manifest and
// only checkpoint files, its manifest is the one the log recorded, and it verified in full
// (every block's checksum) once in this process, or was written by it; a folder whose files
// changed since is verified again. A damaged checkpoint is never counted and never deleted
// (it is reported once); the checkpoint just written is always kept.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "train/checkpoint/checkpoint_log.h"

namespace mt {

struct RunIdentity {
  std::string run;           // the run this process saves as
  std::string resumed_from;  // folder name in the --save directory this process loaded, or ""
};

// root: the --save directory; load: the --load path ("" when none); resumed: the load was
// chosen by --resume auto or a restart (the run continues) rather than named by --load.
RunIdentity identify_run(const CheckpointLog& log, const std::string& root, const std::string& load,
                         bool resumed);

// Before training: every step folder the run will save (will_save(step)) is free, or a
// marked temporary (removed at start), or a checkpoint of this run (replaced when saved
// again: one newer than the checkpoint it resumed from, which --resume auto found damaged),
// or the checkpoint it resumed from (not saved again). Throws UsageError naming the folder.
void check_save_root(const std::string& root, const CheckpointLog& log, const RunIdentity& id,
                     const std::function<bool(int)>& will_save);

class CheckpointRetention {
 public:
  using Warn = std::function<void(const std::string&)>;
  // keep: --keep-checkpoints (0: keep all; the log is kept either way).
  CheckpointRetention(std::string root, int keep, RunIdentity id, CheckpointLog log, Warn warn);

  const RunIdentity& identity() const { return id_; }
  // Before the save of `dir` (a step folder name): a folder of that name is the run's
  // (check_save_root) and is deleted; anything else there throws RuntimeError.
  void before_save(const std::string& dir);
  // Before `dir` (step `step`) is renamed into place from `temp_path` (its manifest
  // written): records it in the log as this run's. Recorded first, so that a crash between
  // the rename and the log's update cannot leave a checkpoint of the run that the log does
  // not know (an entry whose folder never appeared is dropped later).
  void record(const std::string& dir, int step, const std::string& temp_path);
  // After `dir` was published: deletes the run's checkpoints beyond the K newest valid ones.
  // Returns the deleted paths.
  std::vector<std::string> after_publish(const std::string& dir);

 private:
  struct Stamp {
    std::vector<std::pair<std::string, std::pair<uint64_t, int64_t>>> files;  // size, mtime
    bool operator==(const Stamp&) const = default;
  };
  Stamp stamp_of(const std::string& path) const;
  bool valid(const CheckpointLogEntry& e);
  std::vector<std::string> prune(const std::string& just_written);

  std::string root_;
  int keep_;
  RunIdentity id_;
  CheckpointLog log_;
  Warn warn_;
  std::map<std::string, Stamp> verified_;  // folder name -> its files when it verified
  std::map<std::string, bool> reported_;   // damaged folders already reported
};

// CRC-32C of a file's bytes as 8 hex digits, read without blocking ("" when unreadable).
std::string manifest_crc_of(const std::string& step_dir);

}  // namespace mt
