// A run's metrics file (docs/contracts.md §6, plus the {"event": "run"} record a run writes
// first) read for the report page, checked where the page will use it so that drawing
// never meets a surprise:
//   - read through core/input_file.h: a FIFO or device is refused, not waited on, and a file
//     over kMaxTextInputBytes is refused before it is read;
//   - a line that is not JSON is an error naming the file and the line, except a last line
//     without its newline (a run writing it right now), which is left out;
//   - a number beyond a double (1e400) reads as +-Infinity; the page's numeric fields take
//     numbers, null (meshtrain writes NaN as null) and the strings "NaN", "Infinity",
//     "-Infinity"; null is dropped, the others are kept as non-finite numbers, which the
//     charts leave out;
//   - every record is a JSON object whose "event", when present, is a string; a step
//     record's "step" is a finite number; "expert_load" is an array of arrays of numbers; a
//     memory record's "rank" is an integer in 0..2^31-1 and its byte counts are numbers.
// A record of another event is left out. A run with a run record and no step records
// (train --steps 0) is a run: its page says so.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt {

struct RunMetrics {
  std::string name;                    // shown in legends: the metrics path as given
  nlohmann::json run;                  // the {"event": "run"} record (null for older files)
  std::vector<nlohmann::json> steps;   // records with "step"
  std::vector<nlohmann::json> memory;  // {"event": "memory"} records, by rank
};

// `path`: a metrics JSONL file, or a run directory holding metrics.jsonl. Throws
// UsageError "FILE line N: ..." for the first bad record, and when the file holds no
// meshtrain record at all.
RunMetrics read_run_metrics(const std::string& path);

// The metrics file a RUN argument names (the file, or DIR/metrics.jsonl).
std::string metrics_file_of(const std::string& run);

// The records of metrics `text` (named `where` in errors), as read_run_metrics reads them.
RunMetrics parse_run_metrics(const std::string& text, const std::string& where);

}  // namespace mt
