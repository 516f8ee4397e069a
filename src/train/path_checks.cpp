#include "train/path_checks.h"

#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "report/report_page.h"
#include "train/checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_log.h"
#include "train/checkpoint/retention.h"
#include "train/hf_directory.h"
#include "train/hf_export.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

struct NamedPath {
  std::string flag, path;
  OutputUse use = OutputUse::replaced;  // outputs only
};

// Where a path would be written, for comparing outputs that do not exist yet.
std::string absolute_form(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? path : p.string();
}

std::vector<NamedPath> input_files(const TrainOptions& o) {
  std::vector<NamedPath> in;
  auto add = [&](const char* flag, const std::string& path) {
    if (!path.empty()) in.push_back({flag, path});
  };
  add("--config", o.io.config);
  add("--data", o.io.data);
  add("--val-data", o.io.val_data);
  if (is_hf_directory(o.io.init_from))  // a Hugging Face directory: each file it is read from
    for (const std::string& f : hf_input_files(o.io.init_from)) in.push_back({"--init-from", f});
  else
    add("--init-from", o.io.init_from);
  if (!o.io.load.empty() && loads_sharded(o.io.load)) {
    in.push_back({"--load", o.io.load + "/" + kManifestFile});
    // The shards are inputs too (an output over one would destroy the checkpoint); their
    // checks are verify_shards's.
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(o.io.load, ec))
      if (e.path().filename().string().starts_with("rank_"))
        in.push_back({"--load", e.path().string()});
  } else if (!o.io.load.empty())
    for (const char* f : {"state.json", "model.safetensors", "optimizer.safetensors"})
      in.push_back({"--load", o.io.load + "/" + f});
  return in;
}

// The report page a run rewrites beside --metrics X.jsonl (X.html, report/report_page.h):
// an output like the others, unless the metrics go to a device (no page then).
std::string report_page_of(const std::string& metrics) {
  struct stat st {};
  if (metrics.empty() || (::stat(metrics.c_str(), &st) == 0 && S_ISCHR(st.st_mode))) return "";
  return report_path_for(metrics);
}

std::vector<NamedPath> output_files(const TrainOptions& o) {
  std::vector<NamedPath> out;
  // Metrics are appended record by record: /dev/null is a fine place for them.
  if (!o.io.metrics.empty()) out.push_back({"--metrics", o.io.metrics, OutputUse::stream});
  if (const std::string page = report_page_of(o.io.metrics); !page.empty())
    out.push_back({"the report page (beside --metrics " + o.io.metrics + ")", page});
  if (!o.io.export_path.empty()) out.push_back({"--export", o.io.export_path});
  if (!o.io.trace.empty()) out.push_back({"--trace", o.io.trace});
  return out;
}

void check_inputs(const TrainOptions& o) {
  for (const NamedPath& in : input_files(o))
    if (in.flag != "--load") require_input_file(in.flag, in.path);
}

void check_outputs_apart(const std::vector<NamedPath>& outs, const std::vector<NamedPath>& ins) {
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::optional<FileId> id = file_id(outs[i].path);
    for (const NamedPath& in : ins)
      MT_REQUIRE(!id || id != file_id(in.path), outs[i].flag, " ", outs[i].path,
                 " is the same file as ", in.flag, " ", in.path,
                 "; writing it would destroy the input: give another path");
    for (size_t k = 0; k < i; ++k)
      MT_REQUIRE(absolute_form(outs[i].path) != absolute_form(outs[k].path) &&
                     (!id || id != file_id(outs[k].path)),
                 outs[i].flag, " and ", outs[k].flag, " both name ", outs[i].path,
                 "; give each output its own file");
  }
}

// True when `path` lies inside directory `dir` (both as they would be written).
bool is_inside(const std::string& path, const std::string& dir) {
  return absolute_form(path).rfind(absolute_form(dir) + "/", 0) == 0;
}

// --export-hf DIR is published whole (train/hf_export.h): it may hold nothing but an export,
// and no input, no other output and no checkpoint may live in it (nor it in a --save DIR,
// which a save replaces whole, or be one).
void check_hf_export_dir(const TrainOptions& o, const std::vector<NamedPath>& outs,
                         const std::vector<NamedPath>& ins) {
  const std::string& dir = o.io.export_hf;
  require_hf_output_dir("--export-hf", dir);
  for (const NamedPath& in : ins)
    MT_REQUIRE(!is_inside(in.path, dir), "--export-hf ", dir, " holds ", in.flag, " ", in.path,
               "; the export replaces the whole directory: give another one");
  for (const NamedPath& out : outs)
    MT_REQUIRE(!is_inside(out.path, dir), out.flag, " ", out.path, " is inside --export-hf ", dir,
               ", which the export replaces whole; write it elsewhere");
  const std::string& save = o.io.save;
  MT_REQUIRE(save.empty() || (absolute_form(save) != absolute_form(dir) && !is_inside(save, dir) &&
                              !is_inside(dir, save)),
             "--export-hf ", dir, " and --save ", save,
             " overlap; each is replaced whole when written: give them separate directories");
}

// The step of the checkpoint --load names (verified already), 0 without one.
int loaded_step(const IoOptions& io) {
  if (io.load.empty()) return 0;
  return loads_sharded(io.load) ? read_manifest(io.load).step : read_train_state(io.load).step;
}

// Every step folder the run will write into --save DIR is free or the run's own, found now
// rather than at the save of that step (checkpoint/retention.h).
void check_sharded_save_root(const TrainOptions& o) {
  const std::string& root = o.io.save;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;  // created empty by the run
  // The log is rewritten at every save; a special file in its place would fail that save.
  require_output_file("--save", root + "/" + kCheckpointLogFile);
  std::string damage;
  const CheckpointLog log = CheckpointLog::read(root, &damage);
  const RunIdentity id = identify_run(log, root, o.io.load, o.io.resumed);
  const int start = loaded_step(o.io), steps = o.optim.steps, every = o.io.save_every;
  check_save_root(root, log, id, [&](int step) {
    return step == steps || (every > 0 && step > start && step < steps && step % every == 0);
  });
}

void check_save_dir(const TrainOptions& o, const std::vector<NamedPath>& outs) {
  const std::string& save = o.io.save;
  require_output_dir("--save", save);
  // Sharded: DIR holds step_NNNNNN directories and is never replaced whole, so other files
  // in it are safe; only a global checkpoint there would be confusing.
  if (o.io.checkpoint_format == "sharded") {
    MT_REQUIRE(!file_id(save + "/state.json").has_value(), "--save ", save,
               " holds a global checkpoint; give sharded checkpoints their own directory");
    check_sharded_save_root(o);
    return;
  }
  const std::string conflict = checkpoint_dir_conflict(save);
  MT_REQUIRE(conflict.empty(), "--save ", conflict);
  // Each save replaces the directory whole: a file written inside it would vanish.
  const std::string root = absolute_form(save) + "/";
  for (const NamedPath& out : outs)
    MT_REQUIRE(absolute_form(out.path).rfind(root, 0) != 0, out.flag, " ", out.path,
               " is inside --save ", save, ", which every save replaces whole; write it elsewhere");
}

}  // namespace

bool loads_sharded(const std::string& dir) {
  bool tmp = false;
  const std::string name = fs::path(strip_trailing_slashes(dir)).filename().string();
  return is_sharded_checkpoint(dir) || parse_step_dir_name(name, &tmp) >= 0;
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

PathCheckReport check_run_paths(const TrainOptions& o) {
  PathCheckReport report;
  check_inputs(o);
  if (!o.io.load.empty() && loads_sharded(o.io.load)) {
    const ShardedVerification v = verify_sharded_checkpoint(o.io.load);
    report.checkpoint_verified = true;
    report.checkpoint_bytes_verified = v.bytes_verified;
  } else if (!o.io.load.empty()) {
    const CheckpointVerification v = verify_checkpoint(o.io.load);
    report.checkpoint_verified = v.verified;
    report.checkpoint_bytes_verified = v.bytes_verified;
  }
  const std::vector<NamedPath> outs = output_files(o);
  for (const NamedPath& out : outs) require_output_file(out.flag, out.path, out.use);
  check_outputs_apart(outs, input_files(o));
  if (!o.io.export_hf.empty()) check_hf_export_dir(o, outs, input_files(o));
  if (!o.io.save.empty()) check_save_dir(o, outs);
  return report;
}

}  // namespace mt
