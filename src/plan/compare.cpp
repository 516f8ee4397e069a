#include "plan/compare.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/error.h"
#include "plan/model_flops.h"
#include "plan/plan_report.h"

namespace mt::plan {

namespace {

int spec_int(const std::string& spec, const std::string& key, const std::string& v) {
  int out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  MT_REQUIRE(ec == std::errc() && end == v.data() + v.size(), "--compare '", spec, "': ", key,
             " must be an integer (got '", v, "')");
  return out;
}

bool spec_bool(const std::string& spec, const std::string& key, const std::string& v) {
  MT_REQUIRE(v == "true" || v == "false", "--compare '", spec, "': ", key,
             " must be true or false (got '", v, "')");
  return v == "true";
}

// The SPEC's key=value pairs, each key once, in the order given.
std::vector<std::pair<std::string, std::string>> spec_pairs(const std::string& spec) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t comma = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, comma - at);
    const size_t eq = item.find('=');
    MT_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), "--compare '", spec,
               "': expected key=value items separated by commas (got '", item, "')");
    const std::string key = item.substr(0, eq);
    for (const auto& [k, v] : out)
      MT_REQUIRE(k != key, "--compare '", spec, "': ", key, " is given twice");
    out.emplace_back(key, item.substr(eq + 1));
    at = comma + 1;
  }
  return out;
}

double ratio(double a, double best) {
  return best > 0 ? a / best : 1;
}

std::string cell(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string seconds(double s) {
  return s >= 10 ? cell("%.2f s", s) : cell("%.1f ms", s * 1e3);
}

}  // namespace

PlanRequest with_layout_spec(const PlanRequest& base, const std::string& spec) {
  PlanRequest r = base;
  const std::map<std::string, std::optional<int>*> ints = {{"dp", &r.dp},
                                                           {"tp", &r.tp},
                                                           {"pp", &r.pp},
                                                           {"cp", &r.cp},
                                                           {"ep", &r.ep},
                                                           {"zero", &r.zero},
                                                           {"virtual-stages", &r.virtual_stages},
                                                           {"micro-batch", &r.micro_batch}};
  // The named modes, parsed once into their enums (each with its flag's wording).
  const std::map<std::string, std::function<void(const std::string&)>> names = {
      {"schedule", [&](const std::string& v) { r.schedule = v; }},
      {"recompute", [&](const std::string& v) { r.recompute = recompute_of(v); }},
      {"precision", [&](const std::string& v) { r.precision = precision_of(v); }},
      {"cp-comm", [&](const std::string& v) { r.cp_comm = cp_comm_of(v); }}};
  for (const auto& [key, value] : spec_pairs(spec)) {
    if (auto i = ints.find(key); i != ints.end()) {
      *i->second = spec_int(spec, key, value);
    } else if (auto s = names.find(key); s != names.end()) {
      try {
        s->second(value);
      } catch (const UsageError& e) {
        throw UsageError(str("--compare '", spec, "': ", e.what()));
      }
    } else if (key == "sequence-parallel") {
      r.sequence_parallel = spec_bool(spec, key, value);
    } else {
      throw UsageError(str("--compare '", spec, "': unknown key '", key,
                           "' (known: dp tp pp cp ep zero virtual-stages micro-batch schedule "
                           "recompute precision cp-comm sequence-parallel)"));
    }
  }
  try {
    validate_request(r);
  } catch (const UsageError& e) {
    throw UsageError(str("--compare '", spec, "': ", e.what()));
  }
  return r;
}

std::vector<Compared> compare_layouts(const PlanRequest& r, const std::vector<std::string>& specs) {
  MT_REQUIRE(specs.size() >= 2, "--compare needs two or more layouts (got ", specs.size(), ")");
  std::vector<Compared> out;
  for (const std::string& spec : specs) {
    const PlanRequest one = with_layout_spec(r, spec);
    try {
      out.push_back({spec, search_layouts(one, 1).candidates.at(0)});
    } catch (const UsageError& e) {
      throw UsageError(str("--compare '", spec, "': ", e.what()));
    }
  }
  return out;
}

StepBreakdown step_breakdown(const PredictedTime& t) {
  StepBreakdown b;
  b.tp = t.tp_exposed_s, b.cp = t.cp_exposed_s, b.ep = t.ep_exposed_s;
  b.zero3 = t.zero3_exposed_s;
  b.bubble = t.pipeline_s * t.bubble;
  b.compute = t.pipeline_s - b.bubble - b.tp - b.cp - b.ep - b.zero3;
  b.dp = t.dp_exposed_s;
  b.optimizer = t.optimizer_s + t.bf16_weights_s;
  return b;
}

namespace {

double best_step(const std::vector<Compared>& c) {
  double best = c.at(0).best.time.step_s;
  for (const Compared& x : c) best = std::min(best, x.best.time.step_s);
  return best;
}

// One row of the side-by-side table: a label and one cell per layout.
void row(std::ostream& out, const std::string& label, const std::vector<Compared>& c,
         const std::function<std::string(const Candidate&)>& value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%-26s", label.c_str());
  out << buf;
  for (const Compared& x : c) {
    std::snprintf(buf, sizeof buf, " %13s", value(x.best).c_str());
    out << buf;
  }
  out << "\n";
}

void time_rows(std::ostream& out, const std::vector<Compared>& c) {
  using B = StepBreakdown;
  const std::pair<const char*, double B::*> parts[] = {{"  compute (incl. recompute)", &B::compute},
                                                       {"  tp comm exposed", &B::tp},
                                                       {"  cp comm exposed", &B::cp},
                                                       {"  ep comm exposed", &B::ep},
                                                       {"  ZeRO-3 gathers exposed", &B::zero3},
                                                       {"  pipeline bubble", &B::bubble},
                                                       {"  dp reduction exposed", &B::dp},
                                                       {"  optimizer", &B::optimizer}};
  for (const auto& [label, field] : parts) {
    row(out, label, c, [&](const Candidate& k) { return seconds(step_breakdown(k.time).*field); });
    if (field == &B::compute)
      row(out, "    of it recompute", c,
          [](const Candidate& k) { return seconds(k.time.recompute_s); });
  }
  row(out, "  pp p2p per message", c, [](const Candidate& k) { return seconds(k.time.pp_p2p_s); });
}

void memory_rows(std::ostream& out, const std::vector<Compared>& c) {
  const double gib = 1024.0 * 1024 * 1024;
  const std::pair<const char*, int64_t PlannedMemory::*> kinds[] = {
      {"  parameters", &PlannedMemory::params},
      {"  gradients", &PlannedMemory::grads},
      {"  optimizer state", &PlannedMemory::optimizer},
      {"  activations", &PlannedMemory::activations},
      {"  buffers", &PlannedMemory::buffers}};
  out << "memory per device (GiB, the largest stage)\n";
  for (const auto& [label, field] : kinds)
    row(out, label, c, [&](const Candidate& k) { return cell("%.2f", k.memory.*field / gib); });
  row(out, "  total", c, [&](const Candidate& k) { return cell("%.2f", k.memory.total() / gib); });
}

}  // namespace

void print_compare(std::ostream& out, const PlanRequest& r, const std::vector<Compared>& c) {
  out << "meshtrain plan --compare: " << describe_model(r.model, r.attention) << ", batch "
      << r.batch << " x seq " << r.model.seq << ", " << r.devices
      << (r.hardware.local ? " ranks on " : " x ") << r.hardware.name << "\n";
  for (size_t i = 0; i < c.size(); ++i)
    out << "  #" << i + 1 << " " << layout_name(c[i].best.layout) << "   (" << c[i].spec << ")\n";
  const double best = best_step(c);
  row(out, "", c, [&, i = 0](const Candidate&) mutable { return str("#", ++i); });
  row(out, "step", c, [](const Candidate& k) { return seconds(k.time.step_s); });
  row(out, "ratio to the best", c,
      [&](const Candidate& k) { return cell("%.3fx", ratio(k.time.step_s, best)); });
  row(out, "MFU", c, [](const Candidate& k) { return cell("%.1f%%", 100 * k.mfu); });
  row(out, "bubble", c, [](const Candidate& k) { return cell("%.1f%%", 100 * k.time.bubble); });
  out << "time per step (adds up to the step)\n";
  time_rows(out, c);
  memory_rows(out, c);
  for (size_t i = 0; i < c.size(); ++i)
    out << "run #" << i + 1 << ": " << train_command(r, c[i].best.layout) << "\n";
}

std::string compare_json(const PlanRequest& r, const std::vector<Compared>& c) {
  SearchResult s;
  for (const Compared& x : c) s.candidates.push_back(x.best);
  nlohmann::json list = nlohmann::json::parse(plan_json(r, s, int(c.size())))["candidates"];
  const double best = best_step(c);
  for (size_t i = 0; i < c.size(); ++i) {
    const StepBreakdown b = step_breakdown(c[i].best.time);
    list[i]["spec"] = c[i].spec;
    list[i]["ratio_to_best"] = ratio(c[i].best.time.step_s, best);
    list[i]["breakdown_s"] = {{"compute", b.compute},
                              {"tp", b.tp},
                              {"cp", b.cp},
                              {"ep", b.ep},
                              {"zero3", b.zero3},
                              {"bubble", b.bubble},
                              {"dp", b.dp},
                              {"optimizer", b.optimizer},
                              {"recompute", c[i].best.time.recompute_s}};
  }
  return nlohmann::json{{"compare", list}}.dump(1) + "\n";
}

}  // namespace mt::plan
