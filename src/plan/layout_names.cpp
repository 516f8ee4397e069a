#include "plan/layout_names.h"

#include "core/error.h"

namespace mt::plan {

Recompute recompute_of(const std::string& name) {
  Recompute r = Recompute::none;
  MT_REQUIRE(parse_recompute(name, &r), "--recompute must be none, selective or full (got '", name,
             "')");
  return r;
}

Precision precision_of(const std::string& name) {
  Precision p = Precision::fp32;
  MT_REQUIRE(parse_precision(name, &p), "--precision must be fp32 or bf16 (got '", name, "')");
  return p;
}

CpComm cp_comm_of(const std::string& name) {
  for (const auto& [text, c] : cp_comm_names())
    if (text == name) return c;
  throw UsageError(str("--cp-comm must be ring or allgather (got '", name, "')"));
}

}  // namespace mt::plan
