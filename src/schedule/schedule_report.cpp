#include "schedule/schedule_report.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/output_parents.h"
#include "schedule/schedule_render.h"
#include "schedule/schedule_validator.h"

namespace mt {

OpCosts parse_costs(const std::string& spec) {
  std::vector<double> v;
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    errno = 0;
    const double x = std::strtod(item.c_str(), &end);
    MT_REQUIRE(!item.empty() && end == item.c_str() + item.size() && errno == 0 && std::isfinite(x),
               "--costs '", spec, "': '", item, "' is not a number");
    v.push_back(x);
  }
  MT_REQUIRE(v.size() == 3, "--costs '", spec, "' needs three numbers F,B,W (e.g. 1,2,1)");
  MT_REQUIRE(v[0] > 0 && v[1] > 0 && v[2] >= 0, "--costs '", spec,
             "': F and B must be > 0 and W >= 0");
  OpCosts c;
  c.forward = v[0];
  c.backward = v[1];
  c.weight = v[2];
  return c;
}

namespace {

std::string percent(double x) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << 100 * x << "%";
  return os.str();
}

std::string closed_form_text(const Schedule& s) {
  const double cf = closed_form_bubble(s.name, s.stages, s.microbatches, s.chunks);
  if (cf >= 0)
    return str("closed form (F = B = W): ", percent(cf), " = ",
               s.name == "interleaved" ? "(p-1)/(v*m+p-1)" : "(p-1)/(m+p-1)");
  return "closed form: none; with F = B = W and m >= p, zb-h1 idles (p-1)(F+B-W) per stage, "
         "a third of 1f1b's";
}

}  // namespace

int run_schedule_command(const ScheduleArgs& a, std::ostream& os) {
  const int v = a.virtual_stages != 0 ? a.virtual_stages : (a.schedule == "interleaved" ? 2 : 1);
  MT_REQUIRE(a.virtual_stages >= 0, "--virtual-stages must be >= 1 (got ", a.virtual_stages, ")");
  OpCosts costs = parse_costs(a.costs);
  MT_REQUIRE(std::isfinite(a.latency) && a.latency >= 0, "--latency must be >= 0 (got ", a.latency,
             ")");
  costs.latency = a.latency;
  // Written in place (a device such as /dev/stdout is fine); a FIFO would block the open.
  if (!a.svg.empty()) require_output_file("--svg", a.svg, OutputUse::stream);
  const Schedule s = make_schedule(a.schedule, a.pp, a.microbatches, v);
  const ValidationReport r = validate_schedule(s);
  if (!r.ok()) throw RuntimeError(str("generated schedule is invalid:\n", r.summary()));
  const Timeline t = simulate_schedule(s, costs);
  MT_CHECK(!t.deadlocked, t.stuck);

  os << "schedule " << s.name << ": pp " << s.stages << ", microbatches " << s.microbatches
     << ", virtual stages " << s.chunks << ", costs F=" << costs.forward << " B=" << costs.backward
     << " W=" << costs.weight << (s.split_backward ? "" : " (B+W fused)");
  if (costs.latency > 0) os << ", latency " << costs.latency;
  os << "\n";
  render_ascii(s, t, os);
  os << "makespan: " << t.makespan << "; peak in-flight "
     << (s.chunks > 1 ? "(microbatch, chunk) pairs" : "microbatches") << " per stage:";
  for (int x : r.peak_in_flight) os << " " << x;
  os << "\n";
  os << "bubble: " << percent(t.bubble()) << " (simulated: idle / (stages x makespan))\n";
  os << closed_form_text(s) << "\n";
  if (!a.svg.empty()) {
    create_parent_directories(a.svg);
    std::ofstream f(a.svg);
    if (!f) throw RuntimeError(str("cannot write --svg file ", a.svg));
    const std::string title = str(s.name, ": p=", s.stages, ", m=", s.microbatches,
                                  ", v=", s.chunks, ", F/B/W=", costs.forward, "/", costs.backward,
                                  "/", costs.weight, ", bubble ", percent(t.bubble()));
    render_svg(s, t, title, f);
    f.close();
    if (!f) throw RuntimeError(str("failed writing --svg file ", a.svg));
    os << "wrote " << a.svg << "\n";
  }
  return 0;
}

}  // namespace mt
