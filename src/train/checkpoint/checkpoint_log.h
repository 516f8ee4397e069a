// DIR/checkpoint_log.json: which run wrote which step folder of a --save directory of
// sharded checkpoints, in the order they were written. The record retention (retention.h)
// stands on: it deletes only folders the log attributes to the run that is deleting, so a
// user's folder, another run's checkpoint or one written before the log existed is never
// deleted, whatever its step number.
//
//   {"format": "meshtrain-checkpoint-log", "format_version": 1, "next_seq": 8,
//    "checkpoints": [{"dir": "step_000004", "step": 4, "run": "9f0c...", "seq": 6,
//                     "manifest_crc32c": "1a2b3c4d"}, ...],
//    "checksum": "..."}
//
// "seq" is the write order across the directory; "manifest_crc32c" is the CRC-32C of the
// folder's manifest.json as written, so a manifest replaced since is not taken for the run's.
// Rank 0 rewrites the log atomically after each save and each deletion, holding the save
// lock. It lives in the --save directory, so it survives restarts: a run resumed by
// --resume auto (or --max-restarts) continues the run of the checkpoint it resumed from and
// finds that run's earlier checkpoints here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

inline constexpr const char* kCheckpointLogFile = "checkpoint_log.json";

struct CheckpointLogEntry {
  std::string dir;  // a step folder's name in the --save directory ("step_000004")
  int step = 0;
  std::string run;  // the run that wrote it
  int64_t seq = 0;  // larger = written later
  std::string manifest_crc32c;
};

class CheckpointLog {
 public:
  // ROOT/checkpoint_log.json; an empty log when there is none. A log that is damaged
  // (checksum, malformed, a FIFO) reads as empty and `damage` says why: the folders it
  // listed are then nobody's, which retention never deletes.
  static CheckpointLog read(const std::string& root, std::string* damage);

  const std::vector<CheckpointLogEntry>& entries() const { return entries_; }
  const CheckpointLogEntry* find(const std::string& dir) const;
  // Appends an entry for `dir` (replacing an older one of the same name) with the next seq.
  void add(const std::string& dir, int step, const std::string& run,
           const std::string& manifest_crc32c);
  void remove(const std::string& dir);
  // ROOT/checkpoint_log.json, atomically and sealed (metadata_checksum.h). Throws
  // RuntimeError naming the file.
  void write(const std::string& root) const;

 private:
  std::vector<CheckpointLogEntry> entries_;
  int64_t next_seq_ = 1;
};

// A new run's name: 16 hex digits from the random device and the clock.
std::string new_run_id();

}  // namespace mt
