#include "report/metrics_reader.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "core/error.h"
#include "core/input_file.h"
#include "core/json_depth.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

// The fields of a step record the page draws, and those of a memory record.
constexpr const char* kStepNumbers[] = {"loss", "val_loss",  "loss_per_byte", "val_loss_per_byte",
                                        "lr",   "grad_norm", "step_time_s",   "tokens_per_s",
                                        "mfu",  "bubble",    "comm_exposed_s"};
constexpr const char* kMemoryNumbers[] = {"params_bytes", "grads_bytes", "optimizer_bytes",
                                          "activations_peak_bytes"};

// What a JSON value is, for a message: "an array", "a string", "null".
std::string kind_of(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

// Number literals outside strings that overflow a double ("1e400", which nlohmann refuses)
// become the strings "Infinity" / "-Infinity", which the page reads as such.
std::string with_overflows_as_strings(const std::string& line) {
  std::string out;
  out.reserve(line.size());
  bool in_string = false;
  for (size_t i = 0; i < line.size();) {
    const char c = line[i];
    if (in_string) {
      out += line[i++];
      if (c == '\\' && i < line.size())
        out += line[i++];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      size_t end = i + 1;
      while (end < line.size() && (std::isdigit(static_cast<unsigned char>(line[end])) ||
                                   std::strchr(".eE+-", line[end]) != nullptr))
        ++end;
      const std::string literal = line.substr(i, end - i);
      const double v = std::strtod(literal.c_str(), nullptr);
      out += std::isinf(v) ? (v > 0 ? "\"Infinity\"" : "\"-Infinity\"") : literal;
      i = end;
      continue;
    }
    in_string = c == '"';
    out += line[i++];
  }
  return out;
}

nlohmann::json parse_line(const std::string& line, const std::string& at) {
  MT_REQUIRE(json_nesting_depth(line) <= kMaxJsonDepth, at, " nests deeper than ", kMaxJsonDepth,
             " levels; a metrics record is a flat object");
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError(str(at, " is not valid JSON (at byte ", e.byte, " of the line)"));
  } catch (const nlohmann::json::exception&) {
    // A number beyond a double: read it as an infinity below.
  }
  try {
    return nlohmann::json::parse(with_overflows_as_strings(line));
  } catch (const nlohmann::json::exception&) {
    throw UsageError(str(at, " is not valid JSON"));
  }
}

// A numeric field's value as the page takes it; nullopt for null. Throws UsageError
// naming the field for anything else.
std::optional<double> numeric(const nlohmann::json& v, const std::string& at, const char* key) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return std::nullopt;
  // Exactly the strings JSON writers use for non-finite numbers (docs/report.md): "nan" or
  // "inf" is no more a number here than "big" is.
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const double inf = std::numeric_limits<double>::infinity();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (s == "Infinity") return inf;
    if (s == "-Infinity") return -inf;
  }
  throw UsageError(str(at, ": \"", key, "\" is ",
                       v.is_string() ? "the string " + v.dump() : kind_of(v),
                       ", not a number (numbers, null, \"NaN\", \"Infinity\" and \"-Infinity\" "
                       "are read)"));
}

// Replaces the field by its number (dropping it for null).
void normalise_number(nlohmann::json& record, const char* key, const std::string& at) {
  const auto it = record.find(key);
  if (it == record.end()) return;
  if (const std::optional<double> v = numeric(*it, at, key))
    *it = *v;
  else
    record.erase(key);
}

void check_expert_load(nlohmann::json& load, const std::string& at) {
  MT_REQUIRE(load.is_array(), at, ": \"expert_load\" must be an array (one per MoE layer)");
  for (nlohmann::json& layer : load) {
    MT_REQUIRE(layer.is_array(), at,
               ": \"expert_load\" must hold one array of token counts per MoE layer");
    for (nlohmann::json& v : layer)
      v = numeric(v, at, "expert_load").value_or(std::numeric_limits<double>::quiet_NaN());
  }
}

void check_step_record(nlohmann::json& j, const std::string& at) {
  const std::optional<double> step = numeric(j["step"], at, "step");
  MT_REQUIRE(step && std::isfinite(*step), at, ": \"step\" must be a finite number");
  j["step"] = *step;
  for (const char* key : kStepNumbers) normalise_number(j, key, at);
  if (j.contains("expert_load")) check_expert_load(j["expert_load"], at);
}

void check_memory_record(nlohmann::json& j, const std::string& at) {
  const auto rank = j.find("rank");
  MT_REQUIRE(rank != j.end() && rank->is_number_integer() && rank->get<int64_t>() >= 0 &&
                 rank->get<int64_t>() <= std::numeric_limits<int32_t>::max(),
             at, ": a memory record's \"rank\" must be an integer in 0..2^31-1");
  for (const char* key : kMemoryNumbers) normalise_number(j, key, at);
}

// Files one record into `r`; false when it is not a meshtrain record.
bool add_record(nlohmann::json&& j, const std::string& at, RunMetrics& r) {
  MT_REQUIRE(j.is_object(), at, " is ", kind_of(j), ", not a record (a JSON object per line)");
  const auto event = j.find("event");
  MT_REQUIRE(event == j.end() || event->is_string(), at, ": \"event\" is ", kind_of(*event),
             ", not a string");
  const std::string kind = event == j.end() ? "" : event->get<std::string>();
  if (kind == "run") {
    r.run = std::move(j);
  } else if (kind == "memory") {
    check_memory_record(j, at);
    r.memory.push_back(std::move(j));
  } else if (kind.empty() && j.contains("step")) {
    check_step_record(j, at);
    r.steps.push_back(std::move(j));
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string metrics_file_of(const std::string& run) {
  std::error_code ec;
  if (fs::is_directory(run, ec)) return (fs::path(run) / "metrics.jsonl").string();
  return run;
}

RunMetrics parse_run_metrics(const std::string& text, const std::string& where) {
  RunMetrics r;
  int64_t records = 0;
  std::optional<UsageError> first_error;
  size_t begin = 0;
  for (int64_t n = 1; begin < text.size(); ++n) {
    size_t end = text.find('\n', begin);
    const bool torn = end == std::string::npos;  // a run writing this line right now
    if (torn) end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string at = str(where, " line ", n);
    try {
      records += add_record(parse_line(line, at), at, r) ? 1 : 0;
    } catch (const UsageError& e) {
      if (!torn && !first_error) first_error = e;
    }
  }
  // A file of something else says so as a whole; a metrics file names its bad line.
  MT_REQUIRE(records > 0, where, " holds no metrics records",
             first_error ? str(" (", first_error->what(), ")") : std::string(),
             "; give a --metrics file of meshtrain train");
  if (first_error) throw *first_error;
  return r;
}

RunMetrics read_run_metrics(const std::string& run) {
  const std::string path = metrics_file_of(run);
  RunMetrics r = parse_run_metrics(read_input_file("metrics file", path, kMaxTextInputBytes), path);
  r.name = run;
  return r;
}

}  // namespace mt
