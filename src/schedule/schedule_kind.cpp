#include "schedule/schedule_kind.h"

#include "core/error.h"
#include "schedule/schedule.h"

namespace mt {

const std::vector<std::pair<std::string, ScheduleKind>>& schedule_kinds() {
  static const std::vector<std::pair<std::string, ScheduleKind>> kinds = {
      {"gpipe", ScheduleKind::gpipe},
      {"1f1b", ScheduleKind::one_f_one_b},
      {"interleaved", ScheduleKind::interleaved},
      {"zb-h1", ScheduleKind::zb_h1},
      {"dualpipev", ScheduleKind::dualpipev}};
  return kinds;
}

const char* schedule_name(ScheduleKind kind) {
  for (const auto& [name, k] : schedule_kinds())
    if (k == kind) return name.c_str();
  return "?";
}

ScheduleKind schedule_kind(const std::string& name) {
  for (const auto& [n, k] : schedule_kinds())
    if (n == name) return k;
  throw UsageError(
      str("unknown --schedule '", name, "' (expected ", schedule_names_joined(", ", " or "), ")"));
}

}  // namespace mt
