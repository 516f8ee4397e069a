#include "report/schedule_picture.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "report/svg_chart.h"
#include "schedule/schedule.h"
#include "schedule/schedule_render.h"
#include "schedule/schedule_simulator.h"

namespace mt {

namespace {

struct Layout {
  std::string schedule;  // the run's name for it, for the caption
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int64_t pp = 1, microbatches = 1, virtual_stages = 1;
};

// A positive integer field of the layout (a record of another tool may hold anything).
int64_t count_field(const nlohmann::json& layout, const char* key, int64_t fallback) {
  const auto it = layout.find(key);
  if (it == layout.end()) return fallback;
  MT_REQUIRE(it->is_number_integer() && it->get<int64_t>() >= 1 &&
                 it->get<int64_t>() <= std::numeric_limits<int32_t>::max(),
             "layout.", key, " is ", it->dump(), ", not an integer in 1..2^31-1");
  return it->get<int64_t>();
}

Layout layout_of(const nlohmann::json& l) {
  Layout out;
  const auto name = l.find("schedule");
  MT_REQUIRE(name == l.end() || name->is_string(), "layout.schedule is not a string");
  out.schedule = name == l.end() ? "1f1b" : name->get<std::string>();
  out.kind = schedule_kind(out.schedule);
  out.pp = count_field(l, "pp", 1);
  out.microbatches = count_field(l, "microbatches", 1);
  out.virtual_stages = out.kind == ScheduleKind::interleaved
                           ? std::max<int64_t>(2, count_field(l, "virtual_stages", 2))
                           : 1;
  return out;
}

// The most microbatches the page draws: within kMaxScheduleCells, a multiple of pp for the
// interleaved schedule, and at least min(m, pp) so the warm-up still fills; 0 when even
// that is over the limit.
int64_t drawn_microbatches(const Layout& l) {
  const int64_t per_microbatch = l.pp * chunks_per_stage(l.kind, int(l.virtual_stages));
  int64_t m = std::min(l.microbatches, kMaxScheduleCells / per_microbatch);
  if (l.kind == ScheduleKind::interleaved) m -= m % l.pp;
  // dualpipev fills both chunks of every stage first: 2 pp microbatches at least.
  const int64_t least =
      l.kind == ScheduleKind::dualpipev ? 2 * l.pp : std::min(l.microbatches, l.pp);
  return m >= least && m >= 1 ? m : 0;
}

std::string render(const Layout& l, int64_t m, size_t index) {
  const Schedule s = make_schedule(l.kind, int(l.pp), int(m), int(l.virtual_stages));
  const Timeline t = simulate_schedule(s, OpCosts{});
  std::ostringstream os;
  render_svg(
      s, t,
      str(l.schedule, ", pp ", l.pp, ", ", m,
          m == l.microbatches ? "" : str(" of ", l.microbatches), " microbatches (F = B = W)"),
      os);
  std::string svg = os.str();
  const size_t at = svg.find("<svg");
  if (at == std::string::npos) return "";
  return str("<div class=\"schedule\" id=\"chart-schedule-", index, "\">", svg.substr(at),
             "</div>\n");
}

}  // namespace

SchedulePicture schedule_picture(const nlohmann::json& run, const std::string& run_name,
                                 size_t index) {
  const nlohmann::json layout =
      run.is_object() && run.contains("layout") ? run["layout"] : nlohmann::json();
  if (!layout.is_object() || !layout.contains("pp")) return {};
  const std::string summary =
      "The run's schedule as simulated with equal costs (meshtrain "
      "schedule --svg).";
  try {
    const Layout l = layout_of(layout);
    if (l.pp <= 1) return {};
    check_schedule_args(l.kind, int(l.pp), int(l.microbatches), int(l.virtual_stages));
    const int64_t m = l.pp <= kMaxScheduleRows ? drawn_microbatches(l) : 0;
    if (m == 0)
      return {str("<p>schedule of ", html_escape(run_name), " not drawn</p>\n"),
              str("A schedule of pp ", l.pp, " and ", l.microbatches,
                  " microbatches is over what the page draws (", kMaxScheduleRows, " stages, ",
                  kMaxScheduleCells, " stage-microbatch cells); meshtrain schedule draws it.")};
    std::string note = summary;
    if (m < l.microbatches)
      note += str(" Drawn for ", m, " of the run's ", l.microbatches,
                  " microbatches: the page draws at most ", kMaxScheduleCells,
                  " stage-microbatch cells, and more microbatches only lengthen the steady "
                  "phase.");
    return {render(l, m, index), note};
  } catch (const std::exception& e) {
    return {str("<p>schedule of ", html_escape(run_name), " not drawn: ", html_escape(e.what()),
                "</p>\n"),
            summary};
  }
}

}  // namespace mt
