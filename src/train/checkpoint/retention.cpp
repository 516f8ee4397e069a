#include "train/checkpoint/retention.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/input_file.h"
#include "core/temp_marker.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

// Why a folder in the way of a save is not the run's to replace, as the rest of a sentence
// ("" when it is). The log proves the run made a folder of that name; its content must still
// be nothing but checkpoint files. A damaged manifest does not make it a stranger's: it is
// the damaged checkpoint --resume auto skipped.
std::string in_the_way(const std::string& path, bool ours_by_log) {
  if (ours_by_log && holds_only_checkpoint_files(path)) return "";
  if (ours_by_log)
    return "a checkpoint this run wrote that now holds other files too: move them or it";
  if (!is_meshtrain_checkpoint_dir(path))
    return "which is not a meshtrain checkpoint (a folder or file of yours?): move it";
  return "a checkpoint this run did not write (another run's, one written before "
         "checkpoint_log.json existed, or one named by --load): resume that run with "
         "--resume auto, or move it";
}

}  // namespace

std::string manifest_crc_of(const std::string& step_dir) {
  try {
    const std::string text =
        read_input_file("checkpoint", step_dir + "/" + kManifestFile, kMaxJsonInputBytes);
    return crc32c_hex(crc32c_update(0, text.data(), text.size()));
  } catch (const std::exception&) {
    return "";
  }
}

RunIdentity identify_run(const CheckpointLog& log, const std::string& root, const std::string& load,
                         bool resumed) {
  RunIdentity id;
  if (!load.empty()) {
    const fs::path loaded(absolute_form(load));
    if (loaded.parent_path() == fs::path(absolute_form(root)))
      id.resumed_from = loaded.filename().string();
  }
  const CheckpointLogEntry* e = id.resumed_from.empty() ? nullptr : log.find(id.resumed_from);
  id.run = resumed && e ? e->run : new_run_id();
  return id;
}

void check_save_root(const std::string& root, const CheckpointLog& log, const RunIdentity& id,
                     const std::function<bool(int)>& will_save) {
  std::vector<std::pair<int, std::string>> in_the_save_set;  // (step, name), lowest first
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    bool tmp = false;
    const int step = parse_step_dir_name(name, &tmp);
    if (step >= 0 && will_save(step)) in_the_save_set.push_back({step, name});
  }
  std::sort(in_the_save_set.begin(), in_the_save_set.end());
  for (const auto& [step, name] : in_the_save_set) {
    bool tmp = false;
    parse_step_dir_name(name, &tmp);
    const std::string path = root + "/" + name;
    if (tmp) {
      MT_REQUIRE(is_marked_temporary(path), "--save ", root, " holds ", name,
                 ", the name the save of step ", step,
                 " writes to, and it is not a temporary of meshtrain's (it has no marker): move "
                 "it, or give another --save directory");
      continue;
    }
    if (name == id.resumed_from) continue;  // the state it holds is not saved again
    const CheckpointLogEntry* e = log.find(name);
    const std::string why = in_the_way(path, e && e->run == id.run);
    MT_REQUIRE(why.empty(), "--save ", root, " holds ", name, ", where this run would save step ",
               step, ", ", why, " (or give another --save directory)");
  }
}

CheckpointRetention::CheckpointRetention(std::string root, int keep, RunIdentity id,
                                         CheckpointLog log, Warn warn)
    : root_(std::move(root)),
      keep_(keep),
      id_(std::move(id)),
      log_(std::move(log)),
      warn_(std::move(warn)) {}

void CheckpointRetention::before_save(const std::string& dir) {
  const std::string path = root_ + "/" + dir;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return;
  const CheckpointLogEntry* e = log_.find(dir);
  const bool ours = e && e->run == id_.run && dir != id_.resumed_from;
  const std::string why =
      dir == id_.resumed_from ? "the checkpoint this run resumed from" : in_the_way(path, ours);
  if (!why.empty()) throw RuntimeError(str("not saving: ", path, " is in the way, ", why));
  warn_(str("replacing ", path, ", a checkpoint of this run newer than the one it resumed from"));
  discard_step_dir(path);
  log_.remove(dir);
  verified_.erase(dir);
  log_.write(root_);
}

CheckpointRetention::Stamp CheckpointRetention::stamp_of(const std::string& path) const {
  Stamp s;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    struct stat st {};
    if (::stat(e.path().c_str(), &st) != 0) continue;
    const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    s.files.push_back({e.path().filename().string(), {uint64_t(st.st_size), mtime}});
  }
  std::sort(s.files.begin(), s.files.end());
  return s;
}

void CheckpointRetention::record(const std::string& dir, int step, const std::string& temp_path) {
  log_.add(dir, step, id_.run, manifest_crc_of(temp_path));
  log_.write(root_);
}

std::vector<std::string> CheckpointRetention::after_publish(const std::string& dir) {
  // What the run wrote and checked as it wrote it counts as verified, until its files change.
  verified_[dir] = stamp_of(root_ + "/" + dir);
  if (keep_ <= 0) return {};
  std::vector<std::string> deleted = prune(dir);
  if (!deleted.empty()) log_.write(root_);
  return deleted;
}

bool CheckpointRetention::valid(const CheckpointLogEntry& e) {
  const std::string path = root_ + "/" + e.dir;
  std::string why;
  if (!is_meshtrain_checkpoint_dir(path)) {
    why = "it no longer holds only a meshtrain checkpoint";
  } else if (manifest_crc_of(path) != e.manifest_crc32c) {
    why = "its manifest.json is not the one written";
  } else {
    const Stamp now = stamp_of(path);
    const auto it = verified_.find(e.dir);
    if (it != verified_.end() && it->second == now) return true;
    try {
      verify_sharded_checkpoint(path);
      verified_[e.dir] = now;
      return true;
    } catch (const std::exception& ex) {
      why = ex.what();
    }
  }
  if (!reported_[e.dir])
    warn_(str(path, " is damaged (", why,
              "): --keep-checkpoints does not count it and does not delete it"));
  reported_[e.dir] = true;
  return false;
}

std::vector<std::string> CheckpointRetention::prune(const std::string& just_written) {
  std::vector<CheckpointLogEntry> mine;
  for (const CheckpointLogEntry& e : log_.entries())
    if (e.run == id_.run) mine.push_back(e);
  std::sort(mine.begin(), mine.end(),
            [](const CheckpointLogEntry& a, const CheckpointLogEntry& b) { return a.seq > b.seq; });
  std::vector<std::string> deleted;
  int kept = 0;
  for (const CheckpointLogEntry& e : mine) {
    const std::string path = root_ + "/" + e.dir;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec))) {
      log_.remove(e.dir);  // deleted by hand: nothing to keep or count
      continue;
    }
    if (e.dir == just_written || !valid(e)) {
      kept += e.dir == just_written;
      continue;
    }
    if (kept < keep_ || e.dir == id_.resumed_from) {
      kept += kept < keep_;
      continue;
    }
    try {
      discard_step_dir(path);
    } catch (const std::exception& ex) {
      // Something not ours is in the way of its temporary name: keep it, say so once.
      if (!reported_["delete " + e.dir])
        warn_(str("not deleting ", path, " (--keep-checkpoints): ", ex.what()));
      reported_["delete " + e.dir] = true;
      continue;
    }
    log_.remove(e.dir);
    verified_.erase(e.dir);
    deleted.push_back(path);
  }
  return deleted;
}

}  // namespace mt
