// One writer per checkpoint directory. Two runs saving to the same --save DIR would each
// replace the other's checkpoints and both exit 0; the second run must instead stop before
// it starts, naming the first.
//
// The lock is an flock(2) on a sibling file "DIR.lock" (not a file inside DIR: every save
// swaps DIR for a new directory, which would take the lock file with it). flock is released
// by the kernel when its holder dies, so a killed run never leaves a stale lock; the file
// holds the holder's pid, host and start time for the message. It is removed when the
// holder lets go, with the usual re-check (the file locked must still be the one at the
// path) so that a run racing with the removal cannot lock a file nobody else sees.
//
// Holding the lock also makes cleaning safe: a save killed mid-write leaves a full-size
// "DIR.tmp-XXXXXX" sibling (and an interrupted fallback swap "DIR.old-XXXXXX"), marked as
// meshtrain's (core/temp_marker.h); no other writer is alive, so those are deleted. A sibling
// that merely has such a name ("ck.old-backup", a user's copy) has no valid marker and stays.
#pragma once

#include <string>
#include <vector>

namespace mt {

struct StaleTemporaries {
  std::vector<std::string> removed;  // paths deleted
  std::vector<std::string> kept;     // sentences: a marked old copy kept because DIR is missing
};

class SaveDirLock {
 public:
  // Takes the lock on `dir` or throws UsageError naming the holder.
  explicit SaveDirLock(const std::string& dir);
  ~SaveDirLock();
  SaveDirLock(const SaveDirLock&) = delete;
  SaveDirLock& operator=(const SaveDirLock&) = delete;

  // Deletes the marked temporaries of interrupted saves of `dir`.
  StaleTemporaries remove_stale_temporaries();

 private:
  std::string dir_, path_;
  int fd_ = -1;
};

}  // namespace mt
