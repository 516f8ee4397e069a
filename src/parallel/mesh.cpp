#include "parallel/mesh.h"

#include <algorithm>

#include "core/error.h"

namespace mt {

const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::world:
      return "world";
    case GroupKind::dp:
      return "dp";
    case GroupKind::tp:
      return "tp";
    case GroupKind::pp:
      return "pp";
    case GroupKind::ep:
      return "ep";
    case GroupKind::ep_replica:
      return "ep_replica";
    case GroupKind::cp:
      return "cp";
    case GroupKind::dp_cp:
      return "dp_cp";
  }
  return "?";
}

Mesh::Mesh(const MeshShape& s, int world_size) : shape_(s), world_size_(world_size) {
  // Internal invariants: the user-facing rules are validate_train_options' (before any rank).
  MT_CHECK(s.pp >= 1 && s.dp >= 1 && s.tp >= 1 && s.ep >= 1 && s.cp >= 1, "mesh ", s.pp, "x", s.dp,
           "x", s.cp, "x", s.tp, " ep ", s.ep);
  const long world = static_cast<long>(s.pp) * s.dp * s.cp * s.tp;
  MT_CHECK(world == world_size, "--pp ", s.pp, " x --dp ", s.dp,
           s.cp > 1 ? str(" x --cp ", s.cp) : std::string(), " x --tp ", s.tp, " = ", world,
           " ranks, but the world has ", world_size);
  MT_CHECK(s.dp % s.ep == 0, "--ep ", s.ep, " must divide --dp ", s.dp);
}

void Mesh::check_rank(int rank) const {
  MT_CHECK(rank >= 0 && rank < world_size_, "rank ", rank, " outside world of ", world_size_);
}

MeshCoord Mesh::coord(int rank) const {
  check_rank(rank);
  MeshCoord c;
  c.tp = rank % shape_.tp;
  c.cp = (rank / shape_.tp) % shape_.cp;
  c.dp = (rank / (shape_.tp * shape_.cp)) % shape_.dp;
  c.pp = rank / (shape_.tp * shape_.cp * shape_.dp);
  c.ep_group = c.dp / shape_.ep;
  c.ep_rank = c.dp % shape_.ep;
  return c;
}

int Mesh::rank_of(int pp, int dp, int tp, int cp) const {
  MT_CHECK(pp >= 0 && pp < shape_.pp && dp >= 0 && dp < shape_.dp && tp >= 0 && tp < shape_.tp &&
               cp >= 0 && cp < shape_.cp,
           "mesh coordinate (", pp, ",", dp, ",", cp, ",", tp, ") out of range");
  return ((pp * shape_.dp + dp) * shape_.cp + cp) * shape_.tp + tp;
}

std::vector<int> Mesh::members(GroupKind k, int rank) const {
  const MeshCoord c = coord(rank);
  std::vector<int> out;
  switch (k) {
    case GroupKind::world:
      for (int r = 0; r < world_size_; ++r) out.push_back(r);
      break;
    case GroupKind::dp:
      for (int d = 0; d < shape_.dp; ++d) out.push_back(rank_of(c.pp, d, c.tp, c.cp));
      break;
    case GroupKind::tp:
      for (int t = 0; t < shape_.tp; ++t) out.push_back(rank_of(c.pp, c.dp, t, c.cp));
      break;
    case GroupKind::pp:
      for (int p = 0; p < shape_.pp; ++p) out.push_back(rank_of(p, c.dp, c.tp, c.cp));
      break;
    case GroupKind::ep:
      for (int e = 0; e < shape_.ep; ++e)
        out.push_back(rank_of(c.pp, c.ep_group * shape_.ep + e, c.tp, c.cp));
      break;
    case GroupKind::ep_replica:
      // Every cp rank's expert gradients cover its own rows of the sequences: a replica.
      for (int g = 0; g < shape_.dp / shape_.ep; ++g)
        for (int x = 0; x < shape_.cp; ++x)
          out.push_back(rank_of(c.pp, g * shape_.ep + c.ep_rank, c.tp, x));
      break;
    case GroupKind::cp:
      for (int x = 0; x < shape_.cp; ++x) out.push_back(rank_of(c.pp, c.dp, c.tp, x));
      break;
    case GroupKind::dp_cp:
      for (int d = 0; d < shape_.dp; ++d)
        for (int x = 0; x < shape_.cp; ++x) out.push_back(rank_of(c.pp, d, c.tp, x));
      break;
  }
  // Every axis above is increasing in the varying index, so out is already ascending.
  return out;
}

std::vector<std::vector<int>> Mesh::all_groups(GroupKind k) const {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world_size_; ++r) {
    std::vector<int> m = members(k, r);
    if (m.front() == r) groups.push_back(std::move(m));  // count each group once
  }
  return groups;
}

}  // namespace mt
