// What `meshtrain plan` prints: a table of the best candidates, the JSON document of
// docs/contracts.md §5 / issue #15, and (--explain) the assumptions and why the first layouts
// beat the next ones.
#pragma once

#include <iosfwd>

#include "plan/search.h"

namespace mt::plan {

void print_table(std::ostream& out, const PlanRequest& r, const SearchResult& s, int top);
// {"candidates": [{"layout": {...}, "predicted": {...}}]}, best first, `top` of them.
std::string plan_json(const PlanRequest& r, const SearchResult& s, int top);
void print_explain(std::ostream& out, const PlanRequest& r, const SearchResult& s, int top);

}  // namespace mt::plan
