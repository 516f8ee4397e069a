// Checks on the paths a user names, made before anything is opened, read or written, so
// that a mistake costs an error line and not a run, a hang or a file:
//   - an input must be a regular file: opening a FIFO for reading blocks until a writer
//     appears (forever, and no --timeout covers it), and a directory reads as garbage;
//   - an output's directory (or, where folders are missing, the nearest existing one: the
//     writer creates the rest, core/output_parents.h) must be writable now, not after the
//     last step;
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
// How an output reaches its path, which decides what may already be there:
//   replaced: written to a temporary beside it and renamed over it (core/atomic_file.h).
//             A rename over a device, FIFO or socket replaces that node with a regular file
//             (as root, `--out /dev/null` would replace /dev/null), so only a regular file,
//             or nothing, may be there.
//   stream:   opened and written in place, record by record (--metrics). A character device
//             such as /dev/null is a legitimate sink; a FIFO is not (opening it for writing
//             blocks until a reader appears), nor a socket or a block device.
enum class OutputUse { replaced, stream };

// `path` can be written by this process: its directory, or the nearest existing ancestor of
// it, is a writable directory, and
// whatever is there now may be written as `use` says. The one check of every file a
// command writes.
void require_output_file(const std::string& flag, const std::string& path,
                         OutputUse use = OutputUse::replaced);
// What is at `path` now (through symlinks) may be replaced by a rename: nothing, or a
// regular file. The writers' own last check (AtomicFile), for paths no flag checked.
void require_replaceable_file(const std::string& flag, const std::string& path);
// `path` can be published as a directory: whatever is there now is a directory (through
// symlinks), and its parent, or the nearest existing ancestor of it, is a writable directory.
void require_output_dir(const std::string& flag, const std::string& path);

// The directory holding `path` ("." for a bare name), after removing trailing slashes.
std::string parent_directory(const std::string& path);
// "ckpt/" -> "ckpt" ("/" stays), so one directory has one name for its siblings.
std::string strip_trailing_slashes(std::string path);
// The absolute path, links and "." / ".." resolved as far as it exists: where a path would
// be written, to compare paths that do not exist yet (the path itself when that fails).
std::string absolute_form(const std::string& path);

}  // namespace mt
