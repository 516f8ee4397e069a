// Checks on the paths a user names, made before anything is opened, read or written, so
// that a mistake costs an error line and not a run, a hang or a file:
//   - an input must be a regular file: opening a FIFO for reading blocks until a writer
//     appears (forever, and no --timeout covers it), and a directory reads as garbage;
//   - an output's directory must exist and be writable now, not after the last step;
//   - an output must not be an input: writing it would truncate the input under the run
//     (a memory-mapped shard then dies with SIGBUS) or replace the weights it came from.
// Failures throw UsageError naming the flag, the path and what to change.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

namespace mt {

// Identity of a file, through symlinks: two paths name the same file iff their ids match.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};
// The id of what `path` names (following symlinks), or nullopt when nothing is there.
std::optional<FileId> file_id(const std::string& path);

// `path` names a regular file (through symlinks) that this process may read.
void require_input_file(const std::string& flag, const std::string& path);
// `path` names a directory (through symlinks) that this process may read.
void require_input_dir(const std::string& flag, const std::string& path);
// `path` can be created or replaced by this process: its directory exists and is writable,
// and whatever is there now is a regular file (a character device such as /dev/null is
// accepted when allow_device: streams like metrics may go there).
void require_output_file(const std::string& flag, const std::string& path,
                         bool allow_device = false);
// `path` can be published as a directory: its parent exists and is writable, and whatever
// is there now is a directory (through symlinks).
void require_output_dir(const std::string& flag, const std::string& path);

// The directory holding `path` ("." for a bare name), after removing trailing slashes.
std::string parent_directory(const std::string& path);
// "ckpt/" -> "ckpt" ("/" stays), so one directory has one name for its siblings.
std::string strip_trailing_slashes(std::string path);

}  // namespace mt
