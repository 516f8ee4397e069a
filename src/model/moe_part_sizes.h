// The sizes of the overlapped MoE exchange's parts (--moe-overlap-parts P; moe_parts.h),
// in units: one rule for the engine (MoeParts::token_begin cuts a microbatch's tokens at
// these boundaries) and the local planner (plan/local_costs.cpp prices each part's
// exchange and experts at its share), so the two cannot drift apart.
//
// With 3 parts or more the units are 1, 2, .., 2, 1 (2P - 2 in all): nothing of the layer
// hides part 0's dispatch or the last part's combine, so those two parts are the small
// ones; every other exchange travels under a neighbour's experts, and with compute at
// least as long as the exchange (per row, experts >= dispatch + combine) part 1's dispatch
// (2 units) fits under part 0's experts (1 unit), and part P-2's combine under part P-1's.
// Exposed: 1 unit of the dispatch's 2P - 2 and 1 of the combine's, 1/(2P - 2) of the
// exchange against 1/P with equal parts (1/6 against 1/4 at 4 parts). With 1 or 2 parts
// they are equal (P units).
#pragma once

namespace mt {

// The units every part's size is counted in: 2P - 2 from 3 parts on, else P.
inline int moe_part_units(int parts) {
  return parts < 3 ? parts : 2 * parts - 2;
}

// The first unit of part p (0 <= p <= parts; p = parts gives moe_part_units).
inline int moe_part_unit_begin(int parts, int p) {
  if (parts < 3) return p;
  return p == 0 ? 0 : p == parts ? moe_part_units(parts) : 2 * p - 1;
}

// Part p's share of the rows, exactly: its units over all of them.
inline double moe_part_share(int parts, int p) {
  return double(moe_part_unit_begin(parts, p + 1) - moe_part_unit_begin(parts, p)) /
         moe_part_units(parts);
}

}  // namespace mt
