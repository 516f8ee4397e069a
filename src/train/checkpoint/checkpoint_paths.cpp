#include "train/checkpoint/checkpoint_paths.h"

#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/file_checks.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_log.h"
#include "train/checkpoint/global_checkpoint.h"
#include "train/checkpoint/retention.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

bool saves_sharded(const IoOptions& io) {
  return io.checkpoint_format == CheckpointFormat::sharded;
}

// Every step folder the run will write into --save DIR is free or the run's own, found now
// rather than at the save of that step (retention.h).
void check_sharded_save_root(const TrainOptions& o) {
  const std::string& root = o.io.save;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;  // created empty by the run
  // The log is rewritten at every save; a special file in its place would fail that save.
  require_output_file("--save", root + "/" + kCheckpointLogFile);
  std::string damage;
  const CheckpointLog log = CheckpointLog::read(root, &damage);
  const RunIdentity id = identify_run(log, root, o.io.load, o.io.resumed);
  const int start = o.io.load.empty() ? 0 : checkpoint_step(o.io.load);
  const int steps = o.optim.steps, every = o.io.save_every;
  check_save_root(root, log, id, [&](int step) {
    return step == steps || (every > 0 && step > start && step < steps && step % every == 0);
  });
}

}  // namespace

bool loads_sharded(const std::string& dir) {
  bool tmp = false;
  const std::string name = fs::path(strip_trailing_slashes(dir)).filename().string();
  return is_sharded_checkpoint(dir) || parse_step_dir_name(name, &tmp) >= 0;
}

int checkpoint_step(const std::string& dir) {
  return loads_sharded(dir) ? read_manifest(dir).step : read_train_state(dir).step;
}

nlohmann::json recorded_run_config(const std::string& dir) {
  return loads_sharded(dir) ? read_manifest(dir).run : read_train_state(dir).run;
}

void resolve_save_path(IoOptions& io) {
  if (io.save.empty()) return;
  io.save = strip_trailing_slashes(io.save);
  // An existing directory: follow links and drop "." and "..", so the swap's temporary is
  // made beside the real directory and the rename never meets a link or ".".
  std::error_code ec;
  const fs::path target = fs::canonical(io.save, ec);
  if (!ec) io.save = target.string();
}

std::vector<std::string> checkpoint_files(const std::string& dir) {
  std::vector<std::string> files;
  if (!loads_sharded(dir)) {
    for (const char* f : {"state.json", "model.safetensors", "optimizer.safetensors"})
      files.push_back(dir + "/" + f);
    return files;
  }
  files.push_back(dir + "/" + kManifestFile);
  // The shards are inputs too (an output over one would destroy the checkpoint); their
  // checks are verify_shards's.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with("rank_")) files.push_back(e.path().string());
  return files;
}

LoadVerification verify_load(const std::string& dir) {
  if (loads_sharded(dir)) return {true, verify_sharded_checkpoint(dir).bytes_verified};
  const CheckpointVerification v = verify_checkpoint(dir);
  return {v.verified, v.bytes_verified};
}

void check_load_fits(const std::string& dir, const ModelConfig& model) {
  if (loads_sharded(dir)) require_same_model(read_manifest(dir), model, "--load " + dir);
}

void check_save_dir(const TrainOptions& o,
                    const std::vector<std::pair<std::string, std::string>>& outputs) {
  const std::string& save = o.io.save;
  require_output_dir("--save", save);
  // Sharded: DIR holds step_NNNNNN directories and is never replaced whole, so other files
  // in it are safe; only a global checkpoint there would be confusing.
  if (saves_sharded(o.io)) {
    MT_REQUIRE(!file_id(save + "/state.json").has_value(), "--save ", save,
               " holds a global checkpoint; give sharded checkpoints their own directory");
    check_sharded_save_root(o);
    return;
  }
  const std::string conflict = checkpoint_dir_conflict(save);
  MT_REQUIRE(conflict.empty(), "--save ", conflict);
  // Each save replaces the directory whole: a file written inside it would vanish.
  const std::string root = absolute_form(save) + "/";
  for (const auto& [flag, path] : outputs)
    MT_REQUIRE(absolute_form(path).rfind(root, 0) != 0, flag, " ", path, " is inside --save ", save,
               ", which every save replaces whole; write it elsewhere");
}

void prepare_save_root(const IoOptions& io) {
  if (io.save.empty() || !saves_sharded(io)) return;
  std::error_code ec;
  fs::create_directories(io.save, ec);
  MT_REQUIRE(!ec, "--save ", io.save, ": cannot create (", ec.message(), ")");
}

std::string newest_checkpoint(const IoOptions& io,
                              const std::function<void(const std::string&)>& warn) {
  const std::string& dir = io.save;
  if (!fs::is_directory(dir)) return "";
  if (saves_sharded(io)) return newest_valid_checkpoint(dir, warn);
  if (!fs::exists(dir + "/state.json")) return "";
  try {
    verify_checkpoint(dir);
    return dir;
  } catch (const std::exception& e) {
    warn(str("skipping ", dir, ": ", e.what()));
    return "";
  }
}

}  // namespace mt
