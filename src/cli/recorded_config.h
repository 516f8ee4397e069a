// The run's configuration as its checkpoints record it (issue #31, item 2): the model,
// layout, training and data flags, resolved, written and applied through the train flags'
// one registry (train_flags.h), so a flag added later is recorded without a line here.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/options.h"

namespace mt {

// {section: {flag: value}} of the resolved options. data, val_data: the data flags as the
// user gave them (empty: the embedded corpus, or the dataset's own split), made absolute so
// a resume from another directory reads the same files. The layout is recorded as chosen
// (--auto-layout's choice, not the request).
nlohmann::json record_run_config(const TrainOptions& resolved, const std::string& data,
                                 const std::string& val_data);

// A resume from `dir` (checkpoint of `start_step`): the recorded value of every model,
// training and data flag the user did not give is taken; a given flag that differs, and a
// layout flag that differs whether given or not (the layout is the invocation's: any layout
// loads any checkpoint), is checked and announced (train/resume_changes.h). Returns the lines to
// print (none for a checkpoint that records no configuration: it loads as before). Throws
// UsageError for a change of the model's shape.
std::vector<std::string> take_recorded_config(TrainOptions& o, const std::string& dir,
                                              int start_step);

}  // namespace mt
