// What `meshtrain plan` prints: a table of the best candidates, the JSON document of
// docs/contracts.md §5 / issue #15, and (--explain) the assumptions and why the first layouts
// beat the next ones.
#pragma once

#include <iosfwd>
#include <string>

#include "plan/search.h"

namespace mt::plan {

// A layout in one line ("dp16 tp4 pp8 interleaved v8 z2 sp rc-selective mb1 bf16").
std::string layout_name(const Layout& l);

void print_table(std::ostream& out, const PlanRequest& r, const SearchResult& s, int top);
// {"candidates": [{"layout": {...}, "predicted": {...}}]}, best first, `top` of them.
std::string plan_json(const PlanRequest& r, const SearchResult& s, int top);
void print_explain(std::ostream& out, const PlanRequest& r, const SearchResult& s, int top);

}  // namespace mt::plan
