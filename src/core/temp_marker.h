// Proof that a temporary directory is meshtrain's. Clean-up deletes a directory only when it
// can prove meshtrain made it: a name like one meshtrain makes ("ck.tmp-Ab12Cd",
// "step_000005.tmp") is not proof, because a user may name a folder so ("ck.old-backup",
// "ck.tmp-before", a copied checkpoint).
//
// The proof is a marker file, DIR/.meshtrain-temporary, holding the base name of the
// directory it marks. It is written into every temporary directory meshtrain creates, right
// after creating it, and into a directory just before meshtrain renames it to a temporary
// name (the old copy a save swaps out, a checkpoint being pruned). A marker is valid only
// inside the directory it names: a user's copy of a marked directory under another name
// ("cp -r ck.tmp-Ab12Cd ck.old-backup") carries a marker naming someone else and is not
// deleted. A published directory may hold an inert marker (naming its temporary name) for
// the moment between the rename and the marker's removal; readers of checkpoints ignore it.
#pragma once

#include <string>

namespace mt {

inline constexpr const char* kTempMarkerFile = ".meshtrain-temporary";

// Writes DIR/.meshtrain-temporary naming `as_name` (the base name DIR has, or is about to
// be renamed to) and fsyncs it. Throws RuntimeError on failure.
void mark_temporary(const std::string& dir, const std::string& as_name);
// mark_temporary(dir, base name of dir).
void mark_temporary(const std::string& dir);

// True when DIR is a directory (not a link) holding a marker that names DIR's own base name.
// Never blocks (a FIFO named like the marker is not read) and never throws.
bool is_marked_temporary(const std::string& dir);

// Removes DIR whole if is_marked_temporary(dir); returns whether it did.
bool remove_if_marked_temporary(const std::string& dir);

// Removes the marker from a directory that is no longer temporary (best effort).
void unmark_temporary(const std::string& dir);

// Creates a new directory at `path` (which must not exist) and marks it. Throws
// RuntimeError naming the path.
void create_marked_dir(const std::string& path);

}  // namespace mt
