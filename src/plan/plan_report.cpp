#include "plan/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/error.h"
#include "plan/model_flops.h"
#include "plan/prediction_band.h"

namespace mt::plan {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Bytes in the table's memory unit (`unit`: bytes per GiB, or per MiB when every candidate
// shown is below 1 GiB).
double in_unit(int64_t b, double unit) {
  return double(b) / unit;
}

std::string ms(double s) {
  return fmt(s >= 10 ? "%.2f s" : "%.1f ms", s >= 10 ? s : s * 1e3);
}

}  // namespace

std::string layout_name(const Layout& l) {
  std::string s =
      str("dp", l.dp,
          l.cp > 1 ? str(" cp", l.cp, l.cp_comm == CpComm::allgather ? "ag" : "") : std::string(),
          " tp", l.tp, " pp", l.pp);
  if (l.pp > 1) s += " " + l.schedule + (l.virtual_stages > 1 ? str(" v", l.virtual_stages) : "");
  if (l.ep > 1) s += str(" ep", l.ep);
  s += str(" z", l.zero);
  if (l.sequence_parallel) s += " sp";
  if (l.recompute != Recompute::none) s += str(" rc-", recompute_name(l.recompute));
  s += str(" mb", l.micro_batch, " ", precision_name(l.precision));
  return s;
}

void print_table(std::ostream& out, const PlanRequest& r, const SearchResult& s, int top) {
  const ModelConfig& m = r.model;
  out << "meshtrain plan: " << describe_model(m, r.attention) << ", batch " << r.batch << " x seq "
      << m.seq << ", " << r.devices << (r.hardware.local ? " ranks on " : " x ") << r.hardware.name
      << "\n"
      << "  model FLOPs per step " << fmt("%.4g", model_flops_per_step(m, r.batch, r.attention))
      << " (Korthikanti et al. 2022, App. A); " << s.considered << " combinations, " << s.valid
      << " valid, " << s.fit << " fit (" << s.pruned
      << " of them not simulated: their slowest stage alone is slower than #" << s.candidates.size()
      << ")" << (s.uncounted > 0 ? str("; ", s.uncounted, " too large to count (skipped)") : "")
      << "\n";
  char line[512];
  const int n = std::min<int>(top, int(s.candidates.size()));
  int64_t largest = 0;
  for (int i = 0; i < n; ++i) largest = std::max(largest, s.candidates[size_t(i)].memory.total());
  const double unit_bytes = largest < (int64_t(1) << 30) ? 1024.0 * 1024 : 1024.0 * 1024 * 1024;
  auto gib = [unit_bytes](int64_t b) { return in_unit(b, unit_bytes); };
  const char* unit = largest < (int64_t(1) << 30) ? "MiB" : "GiB";
  std::snprintf(line, sizeof line, "%-3s %-58s %10s %11s %7s %6s %7s %22s %8s %20s\n", "#",
                "layout", "step", "tokens/s", "TFLOP/s", "MFU", "bubble",
                (std::string(unit) + " p/g/o/act/buf").c_str(), unit, "exposed tp/dp/ep");
  out << line;
  for (int i = 0; i < n; ++i) {
    const Candidate& c = s.candidates[size_t(i)];
    const PlannedMemory& mm = c.memory;
    const std::string parts = fmt("%.1f", gib(mm.params)) + "/" + fmt("%.1f", gib(mm.grads)) + "/" +
                              fmt("%.1f", gib(mm.optimizer)) + "/" +
                              fmt("%.1f", gib(mm.activations)) + "/" + fmt("%.1f", gib(mm.buffers));
    const std::string exposed =
        ms(c.time.tp_exposed_s) + "/" + ms(c.time.dp_exposed_s) + "/" + ms(c.time.ep_exposed_s);
    std::snprintf(line, sizeof line,
                  "%-3d %-58s %10s %11.0f %7.1f %5.1f%% %6.1f%% %22s %8.2f %20s\n", i + 1,
                  layout_name(c.layout).c_str(), ms(c.time.step_s).c_str(), c.tokens_per_s,
                  c.model_tflops_per_device, 100 * c.mfu, 100 * c.time.bubble, parts.c_str(),
                  gib(mm.total()), exposed.c_str());
    out << line;
  }
  if (n > 0) {
    const Candidate& c = s.candidates[0];
    if (const std::string band = step_band_text(r.hardware, c.layout.precision, c.time.step_s);
        !band.empty())
      out << "#1 step " << ms(c.time.step_s) << ", " << band << "\n";
    out << "run #1: " << train_command(r, c.layout) << "\n";
  }
}

std::string plan_json(const PlanRequest& r, const SearchResult& s, int top) {
  nlohmann::json list = nlohmann::json::array();
  const int n = std::min<int>(top, int(s.candidates.size()));
  for (int i = 0; i < n; ++i) {
    const Candidate& c = s.candidates[size_t(i)];
    const Layout& l = c.layout;
    const PlannedMemory& m = c.memory;
    nlohmann::json j;
    j["layout"] = {{"dp", l.dp},
                   {"tp", l.tp},
                   {"pp", l.pp},
                   {"virtual_stages", l.virtual_stages},
                   {"ep", l.ep},
                   {"zero", l.zero},
                   {"sequence_parallel", l.sequence_parallel},
                   {"recompute", recompute_name(l.recompute)},
                   {"micro_batch", l.micro_batch},
                   {"schedule", l.schedule},
                   {"precision", precision_name(l.precision)},
                   {"cp", l.cp},
                   {"cp_comm", cp_comm_name(l.cp_comm)}};
    j["predicted"] = {{"step_time_s", c.time.step_s},
                      {"tokens_per_s", c.tokens_per_s},
                      {"model_tflops_per_device", c.model_tflops_per_device},
                      {"mfu", c.mfu},
                      {"bubble", c.time.bubble},
                      {"blocking_waits_per_rank", c.time.blocking_waits},
                      {"wake_s", c.time.wake_s},
                      {"fits", c.fits},
                      {"memory_bytes",
                       {{"params", m.params},
                        {"grads", m.grads},
                        {"optimizer", m.optimizer},
                        {"activations", m.activations},
                        {"buffers", m.buffers},
                        {"total", m.total()}}},
                      {"exposed_comm_s",
                       {{"tp", c.time.tp_exposed_s},
                        {"dp", c.time.dp_exposed_s},
                        {"ep", c.time.ep_exposed_s},
                        {"cp", c.time.cp_exposed_s},
                        {"pp_p2p_per_message", c.time.pp_p2p_s},
                        {"zero3", c.time.zero3_exposed_s}}}};
    // Only where the profile has a band (docs/contracts.md §5).
    if (const auto band = step_band(r.hardware, l.precision, c.time.step_s))
      j["predicted"]["step_time_band_s"] = {band->low_s, band->high_s};
    j["command"] = train_command(r, l);
    list.push_back(std::move(j));
  }
  return nlohmann::json{{"candidates", list}}.dump(1) + "\n";
}

void print_explain(std::ostream& out, const PlanRequest& r, const SearchResult& s, int top) {
  out << "\nhardware " << r.hardware.name << ":\n";
  for (const std::string& src : r.hardware.sources) out << "  - " << src << "\n";
  out << "assumptions:\n";
  for (const std::string& a : time_assumptions(r)) out << "  - " << a << "\n";
  const int n = std::min<int>(top, int(s.candidates.size()));
  out << "breakdown (per step; pipeline = the simulator's makespan incl. bubble):\n";
  for (int i = 0; i < n; ++i) {
    const Candidate& c = s.candidates[size_t(i)];
    const PredictedTime& t = c.time;
    double fmax = 0, bmax = 0, wmax = 0;
    for (const StageCosts& sc : t.stages) {
      fmax = std::max(fmax, sc.forward);
      bmax = std::max(bmax, sc.backward);
      wmax = std::max(wmax, sc.weight);
    }
    out << "  #" << i + 1 << " " << layout_name(c.layout) << ": step " << ms(t.step_s)
        << " = pipeline " << ms(t.pipeline_s) << " (bubble " << fmt("%.1f%%", 100 * t.bubble)
        << ", slowest stage per microbatch F " << ms(fmax) << " B " << ms(bmax) << " W " << ms(wmax)
        << ", p2p " << ms(t.pp_p2p_s) << " per message) + dp exposed " << ms(t.dp_exposed_s)
        << (t.dp_sms_s > 0 ? " (of which the hidden collectives' SMs " + ms(t.dp_sms_s) + ")"
                           : std::string())
        << " + optimizer " << ms(t.optimizer_s)
        << (t.bf16_weights_s > 0 ? " + bf16 weight copies " + ms(t.bf16_weights_s) : "")
        << "; inside: tp comm " << ms(t.tp_exposed_s) << ", ep comm " << ms(t.ep_exposed_s)
        << (c.layout.cp > 1 ? ", cp comm " + ms(t.cp_exposed_s) : std::string())
        << ", zero-3 exposed " << ms(t.zero3_exposed_s) << ", recompute " << ms(t.recompute_s)
        << "; memory stage " << c.memory.pp_stage << "\n";
  }
  if (n >= 2) {
    const Candidate& a = s.candidates[0];
    const Candidate& b = s.candidates[1];
    out << "#1 vs #2: " << fmt("%.2f%%", 100 * (b.time.step_s / a.time.step_s - 1))
        << " shorter step; pipeline " << ms(a.time.pipeline_s) << " vs " << ms(b.time.pipeline_s)
        << ", bubble " << fmt("%.1f%%", 100 * a.time.bubble) << " vs "
        << fmt("%.1f%%", 100 * b.time.bubble) << ", tp comm " << ms(a.time.tp_exposed_s) << " vs "
        << ms(b.time.tp_exposed_s) << ", dp exposed " << ms(a.time.dp_exposed_s) << " vs "
        << ms(b.time.dp_exposed_s) << ", recompute " << ms(a.time.recompute_s) << " vs "
        << ms(b.time.recompute_s) << "\n";
  }
}

}  // namespace mt::plan
