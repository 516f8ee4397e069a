#include "cli/recorded_config.h"

#include <algorithm>
#include <filesystem>

#include "cli/train_flags.h"
#include "core/error.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/resume_changes.h"

namespace mt {

namespace {

// The sections a checkpoint records; io (outputs, --load) and engine (how the ranks are
// launched) belong to each invocation, and so does the layout, which is recorded to be
// compared only.
const std::vector<std::string>& recorded_sections() {
  static const std::vector<std::string> s = {"model", "parallel", "train", "data"};
  return s;
}

std::string absolute_path(const std::string& p) {
  if (p.empty()) return p;
  std::error_code ec;
  const std::filesystem::path a = std::filesystem::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

// A value for the change line: a path or a choice without quotes; an empty data flag (the
// embedded corpus, or the dataset's own split) as "(default)".
std::string value_text(const std::string& section, const nlohmann::json& v) {
  if (section == "data" && v == "") return "(default)";
  return v.is_string() ? v.get<std::string>() : v.dump();
}

bool was_given(const TrainOptions& o, const std::string& flag) {
  return std::find(o.flags_given.begin(), o.flags_given.end(), flag) != o.flags_given.end();
}

// The data flags compare as the files they name, whatever directory the user is in.
nlohmann::json comparable(const std::string& section, const nlohmann::json& v) {
  return section == "data" && v.is_string() ? nlohmann::json(absolute_path(v)) : v;
}

}  // namespace

nlohmann::json record_run_config(const TrainOptions& resolved, const std::string& data,
                                 const std::string& val_data) {
  TrainOptions copy = resolved;
  copy.io.data = absolute_path(data);
  copy.io.val_data = absolute_path(val_data);
  copy.parallel.auto_layout = false;
  copy.parallel.ranks = 0;
  FlagSet flags;
  define_train_flags(flags, copy);
  return flags.to_json(recorded_sections());
}

std::vector<std::string> take_recorded_config(TrainOptions& o, const std::string& dir,
                                              int start_step) {
  const nlohmann::json rec = recorded_run_config(dir);
  if (rec.is_null()) return {};
  // recorded: the checkpoint's run as it was; o: the given flags over it.
  TrainOptions recorded = o;
  FlagSet before, now;
  define_train_flags(before, recorded);
  define_train_flags(now, o);
  std::vector<ConfigChange> changes;
  for (const auto& [section, flags] : rec.items()) {
    if (!flags.is_object()) continue;
    for (const auto& [flag, value] : flags.items()) {
      const std::string where = str("--load ", dir, ": its recorded [", section, "] ", flag);
      // A flag of another meshtrain: a model flag this one does not know could be a shape
      // it would not build, so it is refused; others are settings it does without.
      const bool known = before.set_from_json(section, flag, value, where);
      MT_REQUIRE(known || section != "model", where, " is not a model flag this meshtrain knows");
      if (!known) continue;
      // The layout is this invocation's (the ranks it has now): recorded, compared, never taken.
      if (section != "parallel" && !was_given(o, flag)) {
        now.set_from_json(section, flag, value, where);
        continue;
      }
      const nlohmann::json given = now.json_value(section, flag);
      if (comparable(section, given) != comparable(section, value))
        changes.push_back({flag, value_text(section, value), value_text(section, given)});
    }
  }
  o.vocab_given = true;  // the checkpoint's vocabulary, not one read from the data again
  std::vector<std::string> lines = resume_change_lines(changes, recorded, o, start_step, dir);
  if (lines.empty())
    lines.push_back(str("resumed from step ", start_step, " of ", dir,
                        " with the model, layout, training and data it recorded"));
  return lines;
}

}  // namespace mt
