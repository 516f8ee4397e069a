#include "schedule/schedule_report.h"

#include <algorithm>
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

// DualPipe's table gives DualPipeV's idle per device; here in the costs given (per chunk),
// next to what the simulator finds for the same costs.
std::string dualpipe_formula_text(const Schedule& s, const OpCosts& c, const Timeline& t) {
  const double idle = dualpipe_paper_idle(s.stages, c);
  const double busy = t.busy.empty() ? 0 : t.busy[0];
  return str("DualPipe paper: idle (PP/2-1)(F&B+B-3W) per device, PP = 2p = ", 2 * s.stages,
             " chunk stages, B = the full backward ", c.backward + c.weight, ", F&B = ",
             c.forward + c.backward + c.weight -
                 std::clamp(c.fb_overlap, 0.0, 1.0) * std::min(c.forward, c.backward),
             c.fb_overlap > 0 ? str(" (halves overlapping by ", c.fb_overlap, ")")
                              : std::string(" (the halves one after the other)"),
             ": ", idle, " per stage, bubble ", percent(idle / (idle + busy)), "; simulated idle ",
             t.idle(0), " on stage 0");
}

std::string closed_form_text(const Schedule& s, const OpCosts& c, const Timeline& t) {
  const double cf = closed_form_bubble(s.kind, s.stages, s.microbatches, s.chunks);
  if (cf >= 0)
    return str("closed form (F = B = W): ", percent(cf), " = ",
               s.kind == ScheduleKind::interleaved ? "(p-1)/(v*m+p-1)" : "(p-1)/(m+p-1)");
  if (s.kind == ScheduleKind::dualpipev)
    return "closed form: none; " + dualpipe_formula_text(s, c, t);
  return "closed form: none; with F = B = W and m >= p, zb-h1 idles (p-1)(F+B-W) per stage, "
         "a third of 1f1b's";
}

// Activations in flight per stage: whole microbatches, or (microbatch, chunk) pairs of
// which each holds about 1/v of the stage's layers.
std::string memory_text(const Schedule& s, const ValidationReport& r) {
  std::string out = s.chunks > 1 ? "peak in-flight (microbatch, chunk) pairs per stage:"
                                 : "peak in-flight microbatches per stage:";
  for (int x : r.peak_in_flight) out += str(" ", x);
  if (s.chunks == 1) return out;
  out += str(" (a pair holds 1/", s.chunks, " of a stage's layers: about");
  for (int x : r.peak_in_flight) out += str(" ", double(x) / s.chunks);
  return out + " microbatches of the stage)";
}

// The sizes the command answers at once: the simulation and the timeline grow with the
// cells (stage, microbatch, chunk) and with the square of the stages; --pp 2147483647 ran
// out of memory and --pp 64 --microbatches 65536 did not answer in 20 s.
constexpr int kMaxStages = 1024;
constexpr int64_t kMaxCells = int64_t(1) << 16;

void require_answerable(const ScheduleArgs& a, int v) {
  MT_REQUIRE(a.pp >= 1 && a.pp <= kMaxStages, "--pp must be in 1..", kMaxStages, " (got ", a.pp,
             ")");
  MT_REQUIRE(a.microbatches >= 1, "--microbatches must be >= 1 (got ", a.microbatches, ")");
  MT_REQUIRE(a.virtual_stages >= 0, "--virtual-stages must be >= 1 (got ", a.virtual_stages, ")");
  const int64_t cells = int64_t(a.pp) * a.microbatches * v;
  MT_REQUIRE(cells <= kMaxCells, "--pp ", a.pp, " x --microbatches ", a.microbatches,
             " x --virtual-stages ", v, " is ", cells, " cells, more than the ", kMaxCells,
             " this command simulates and prints; give fewer");
}

}  // namespace

int run_schedule_command(const ScheduleArgs& a, std::ostream& os) {
  const ScheduleKind kind = schedule_kind(a.schedule);
  const bool two_chunks = kind == ScheduleKind::interleaved || kind == ScheduleKind::dualpipev;
  const int v = a.virtual_stages != 0 ? a.virtual_stages : (two_chunks ? 2 : 1);
  require_answerable(a, v);
  OpCosts costs = parse_costs(a.costs);
  MT_REQUIRE(std::isfinite(a.latency) && a.latency >= 0, "--latency must be >= 0 (got ", a.latency,
             ")");
  costs.latency = a.latency;
  MT_REQUIRE(std::isfinite(a.fb_overlap) && a.fb_overlap >= 0 && a.fb_overlap <= 1,
             "--fb-overlap must be between 0 and 1 (got ", a.fb_overlap, ")");
  costs.fb_overlap = a.fb_overlap;
  // Written in place (a device such as /dev/stdout is fine); a FIFO would block the open.
  if (!a.svg.empty()) require_output_file("--svg", a.svg, OutputUse::stream);
  const Schedule s = make_schedule(kind, a.pp, a.microbatches, v);
  const ValidationReport r = validate_schedule(s);
  if (!r.ok()) throw RuntimeError(str("generated schedule is invalid:\n", r.summary()));
  const Timeline t = simulate_schedule(s, costs);
  MT_CHECK(!t.deadlocked, t.stuck);
  // Finite costs whose sum is not (1e308 each) printed "makespan: inf" and "bubble: -nan%".
  MT_REQUIRE(std::isfinite(t.makespan), "--costs ", a.costs, " and --latency ", a.latency,
             " add up beyond a double (makespan inf); give smaller costs");

  os << "schedule " << s.name << ": pp " << s.stages << ", microbatches " << s.microbatches
     << ", virtual stages " << s.chunks << ", costs F=" << costs.forward << " B=" << costs.backward
     << " W=" << costs.weight << (s.split_backward ? "" : " (B+W fused)");
  if (costs.latency > 0) os << ", latency " << costs.latency;
  if (costs.fb_overlap > 0) os << ", F&B overlap " << costs.fb_overlap;
  os << "\n";
  render_ascii(s, t, os);
  os << "makespan: " << t.makespan << "; " << memory_text(s, r) << "\n";
  os << "bubble: " << percent(t.bubble()) << " (simulated: idle / (stages x makespan))\n";
  os << closed_form_text(s, costs, t) << "\n";
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
