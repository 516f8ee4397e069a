// The pipeline schedules by kind. The user names one (--schedule, a metrics file's layout);
// that name is parsed here once, and everything after it (the generators' dispatch, the
// argument rules, the chunk placement, the closed-form bubble) switches on the kind. The
// name stays what messages and records print: schedule_name gives back exactly what the
// user typed, since only these names are accepted.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mt {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1, dualpipev };

// The one table of names, in the order messages and --help show them.
const std::vector<std::pair<std::string, ScheduleKind>>& schedule_kinds();
const char* schedule_name(ScheduleKind kind);
// UsageError `unknown --schedule 'x' (expected gpipe, 1f1b, interleaved, zb-h1 or dualpipev)`
// for any other name.
ScheduleKind schedule_kind(const std::string& name);

}  // namespace mt
