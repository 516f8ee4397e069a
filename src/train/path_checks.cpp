#include "train/path_checks.h"

#include <filesystem>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/hf_directory.h"
#include "train/hf_export.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

struct NamedPath {
  std::string flag, path;
  OutputUse use = OutputUse::replaced;  // outputs only
};

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
  if (!o.io.load.empty())
    for (const std::string& f : checkpoint_files(o.io.load)) in.push_back({"--load", f});
  return in;
}

std::vector<NamedPath> output_files(const TrainOptions& o) {
  std::vector<NamedPath> out;
  // Metrics are appended record by record: /dev/null is a fine place for them.
  if (!o.io.metrics.empty()) out.push_back({"--metrics", o.io.metrics, OutputUse::stream});
  // The report page a run rewrites beside --metrics: an output like the others.
  if (!o.io.report_page.empty())
    out.push_back({"the report page (beside --metrics " + o.io.metrics + ")", o.io.report_page});
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

}  // namespace

PathCheckReport check_run_paths(const TrainOptions& o) {
  PathCheckReport report;
  check_inputs(o);
  if (!o.io.load.empty()) {
    const LoadVerification v = verify_load(o.io.load);
    report.checkpoint_verified = v.verified;
    report.checkpoint_bytes_verified = v.bytes_verified;
  }
  const std::vector<NamedPath> outs = output_files(o);
  for (const NamedPath& out : outs) require_output_file(out.flag, out.path, out.use);
  check_outputs_apart(outs, input_files(o));
  if (!o.io.export_hf.empty()) check_hf_export_dir(o, outs, input_files(o));
  if (!o.io.save.empty()) {
    std::vector<std::pair<std::string, std::string>> named;
    for (const NamedPath& out : outs) named.push_back({out.flag, out.path});
    check_save_dir(o, named);
  }
  return report;
}

}  // namespace mt
