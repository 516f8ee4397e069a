#include "comm/fault.h"

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "core/error.h"

namespace mt {

namespace {

bool parse_nonneg(const std::string& s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

}  // namespace

FaultSpec parse_fault_spec(const std::string& text) {
  FaultSpec spec;
  if (text.empty()) return spec;
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i)
    if (i == text.size() || text[i] == ':') {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  const bool ok = parts.size() == 4 && parts[0] == "rank" && parts[2] == "step" &&
                  parse_nonneg(parts[1], &spec.rank) && parse_nonneg(parts[3], &spec.step);
  MT_REQUIRE(ok, "MESHTRAIN_FAULT='", text,
             "' is not of the form rank:R:step:S (R, S non-negative integers)");
  return spec;
}

FaultSpec fault_spec_from_env() {
  const char* v = std::getenv("MESHTRAIN_FAULT");
  return parse_fault_spec(v ? v : "");
}

void maybe_inject_fault(const FaultSpec& spec, int global_rank, int step, CommWorld& world) {
  if (!spec.enabled() || spec.rank != global_rank || spec.step != step) return;
  const std::string msg = str("rank ", global_rank, ": injected fault at step ", step);
  // Threads of a process (local, hybrid): throw, so the job stops the process's other ranks
  // and names this one.
  if (std::strcmp(world.backend_name(), "mpi") != 0) throw RuntimeError(msg);
  std::cerr << "meshtrain: error: " << msg << std::endl;
  std::exit(1);
}

}  // namespace mt
