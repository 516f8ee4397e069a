// The pipeline schedule of a run with pp > 1 on its report page, drawn as `meshtrain
// schedule --svg` draws it (equal costs), from the layout in the run's {"event": "run"}
// record. The page stays small whatever the run says: a schedule of more than
// kMaxScheduleCells (stage, microbatch, chunk) cells is drawn for fewer microbatches, whose
// warm-up, steady phase and cool-down have the same shape, and the note says so; one of
// more than kMaxScheduleRows stage rows, or a layout that is not a schedule, is not drawn
// and the note says why.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mt {

inline constexpr int64_t kMaxScheduleCells = 2048;
inline constexpr int64_t kMaxScheduleRows = 64;  // stages x virtual stages

struct SchedulePicture {
  std::string body;  // the picture's HTML; empty when the run has no pipeline
  std::string note;  // what the page shows, and what it left out
};

// `index` makes the element id (chart-schedule-INDEX); `run_name` is for messages.
SchedulePicture schedule_picture(const nlohmann::json& run_record, const std::string& run_name,
                                 size_t index);

}  // namespace mt
