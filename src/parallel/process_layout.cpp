#include "parallel/process_layout.h"

#include <sstream>

#include "comm/communicator.h"
#include "comm/hybrid/placement.h"
#include "core/error.h"

namespace mt {

const char* placement_name(GroupPlacement p) {
  switch (p) {
    case GroupPlacement::in_process:
      return "inside a process";
    case GroupPlacement::one_per_process:
      return "across processes (MPI)";
    case GroupPlacement::hierarchical:
      return "across processes (hierarchical)";
    case GroupPlacement::uneven:
      return "uneven";
  }
  return "?";
}

namespace {

constexpr GroupKind kKinds[] = {GroupKind::world, GroupKind::tp,        GroupKind::cp,
                                GroupKind::dp,    GroupKind::dp_cp,     GroupKind::pp,
                                GroupKind::ep,    GroupKind::ep_replica};

int world_of(const MeshShape& s) {
  return s.world();
}

// The cp kinds exist only with cp > 1 (parallel_context.cpp makes them only then).
bool listed(GroupKind kind, const MeshShape& s) {
  return s.cp > 1 || (kind != GroupKind::cp && kind != GroupKind::dp_cp);
}

}  // namespace

std::vector<GroupLayout> process_layout(const MeshShape& shape, int k) {
  const int world = world_of(shape);
  MT_REQUIRE(k >= 1, "--ranks-per-process must be >= 1 (got ", k, ")");
  MT_REQUIRE(world % k == 0, "--ranks-per-process ", k, " does not divide the ", world,
             " ranks of the layout (--pp x --dp x --cp x --tp); each process runs the same number");
  const Mesh mesh(shape, world);
  std::vector<GroupLayout> out;
  for (GroupKind kind : kKinds) {
    if (!listed(kind, shape)) continue;
    std::vector<std::vector<int>> groups;
    if (kind == GroupKind::world) {
      groups.emplace_back();
      for (int r = 0; r < world; ++r) groups.back().push_back(r);
    } else {
      groups = mesh.all_groups(kind);
    }
    for (auto& members : groups) {
      const hybrid::GroupSpan span = hybrid::group_span(members, k);
      GroupLayout g{kind, std::move(members), GroupPlacement::in_process,
                    static_cast<int>(span.processes.size())};
      if (span.uneven())
        g.placement = GroupPlacement::uneven;
      else if (span.crosses_processes())
        g.placement =
            span.per_process == 1 ? GroupPlacement::one_per_process : GroupPlacement::hierarchical;
      out.push_back(std::move(g));
    }
  }
  return out;
}

void validate_process_layout(const MeshShape& shape, int k) {
  for (const GroupLayout& g : process_layout(shape, k)) {
    if (g.placement != GroupPlacement::uneven) continue;
    // Suggest the divisors of the world that place every group evenly.
    std::string good;
    const int world = world_of(shape);
    for (int c = 1; c <= world; ++c) {
      if (world % c) continue;
      bool ok = true;
      for (const GroupLayout& h : process_layout(shape, c))
        ok &= h.placement != GroupPlacement::uneven;
      if (ok) good += (good.empty() ? "" : ", ") + std::to_string(c);
    }
    throw UsageError(str("--ranks-per-process ", k, " puts different numbers of the members of ",
                         group_name(group_kind_name(g.kind), g.members),
                         " in different processes, which the hybrid world cannot reduce over; "
                         "--ranks-per-process values that work for this layout: ",
                         good));
  }
}

std::string describe_process_layout(const MeshShape& shape, int k) {
  const std::vector<GroupLayout> groups = process_layout(shape, k);
  const int world = world_of(shape);
  std::ostringstream o;
  o << "layout: pp " << shape.pp << " x dp " << shape.dp;
  if (shape.cp > 1) o << " x cp " << shape.cp;
  o << " x tp " << shape.tp << " (ep " << shape.ep << ") = " << world << " ranks on " << world / k
    << " processes x " << k << " ranks per process\n";
  for (int p = 0; p < world / k; ++p) {
    std::vector<int> ranks;
    for (int r = p * k; r < (p + 1) * k; ++r) ranks.push_back(r);
    o << "  process " << p << ": ranks " << group_name("", ranks) << "\n";
  }
  for (GroupKind kind : kKinds) {
    if (kind == GroupKind::world || !listed(kind, shape)) continue;
    o << group_kind_name(kind) << " groups:\n";
    for (const GroupLayout& g : groups) {
      if (g.kind != kind) continue;
      o << "  " << group_name(group_kind_name(kind), g.members) << "  "
        << placement_name(g.placement);
      if (g.processes > 1) o << ", " << g.processes << " processes";
      o << "\n";
    }
  }
  return o.str();
}

std::string summarize_process_layout(const MeshShape& shape, int k) {
  const std::vector<GroupLayout> groups = process_layout(shape, k);
  std::string out = str("hybrid: ", world_of(shape) / k, " processes x ", k, " ranks");
  for (GroupKind kind : kKinds) {
    // Without expert parallelism the expert-replica groups are the dp groups.
    if (kind == GroupKind::world || (kind == GroupKind::ep_replica && shape.ep == 1) ||
        !listed(kind, shape))
      continue;
    // Usually every group of a kind runs alike; where not, each way is listed once.
    std::string ways;
    for (const GroupLayout& g : groups) {
      if (g.kind != kind || g.members.size() < 2) continue;
      const std::string w = placement_name(g.placement);
      if (ways.find(w) == std::string::npos) ways += (ways.empty() ? "" : " / ") + w;
    }
    if (!ways.empty()) out += str(" | ", group_kind_name(kind), " ", ways);
  }
  return out;
}

}  // namespace mt
