// The device mesh: a pure function from the parallel sizes and a rank to that rank's
// coordinates and the member lists of its groups (docs/contracts.md §7). No I/O, no state.
//
// world = pp * dp * cp * tp; tp varies fastest, then cp, then dp, then pp (Megatron's
// tp-cp-dp-pp order, docs/contracts.md §11):
//   rank = ((pp_idx * dp + dp_idx) * cp + cp_idx) * tp + tp_idx
// Context parallelism (cp > 1) splits each sequence over the cp group (same pp, dp, tp); the
// "dp_cp" group joins the dp and cp ranks of one (pp, tp): the replicas whose gradients are
// reduced (a cp rank's gradient is a partial sum over the sequence, like a dp rank's over the
// batch). With cp = 1 the numbering and every group are exactly the cp-less ones.
// Expert parallelism splits the dp axis: ep divides dp, an ep group is ep consecutive dp
// indices with the same (pp, tp); ep_group = dp_idx / ep, ep_rank = dp_idx % ep. The
// "expert replica" group joins the dp ranks holding the same experts (same ep_rank, same
// pp and tp, one per ep group): expert gradients are averaged across it, not across dp.
//
// Worked example, pp=2 dp=2 tp=2 ep=2 (8 ranks):
//   rank  pp dp tp  | tp group  dp group  pp group  ep group  ep replica
//     0    0  0  0  | [0,1]     [0,2]     [0,4]     [0,2]     [0]
//     1    0  0  1  | [0,1]     [1,3]     [1,5]     [1,3]     [1]
//     2    0  1  0  | [2,3]     [0,2]     [2,6]     [0,2]     [2]
//     3    0  1  1  | [2,3]     [1,3]     [3,7]     [1,3]     [3]
//     4    1  0  0  | [4,5]     [4,6]     [0,4]     [4,6]     [4]
//     5    1  0  1  | [4,5]     [5,7]     [1,5]     [5,7]     [5]
//     6    1  1  0  | [6,7]     [4,6]     [2,6]     [4,6]     [6]
//     7    1  1  1  | [6,7]     [5,7]     [3,7]     [5,7]     [7]
// With cp=2 (pp=1 dp=2 tp=1): ranks 0,1 are cp group [0,1] of dp 0, ranks 2,3 of dp 1; the
// dp groups are [0,2] and [1,3] and the one dp_cp group is [0..3].
// Experts under cp (docs/contracts.md §9a, §11): an ep group stays inside one cp index (its
// ranks exchange the tokens that cp index holds), and the expert replica group spans every
// cp index too, since each cp rank's expert gradients cover only its rows of the sequences.
// With cp=2 dp=2 ep=2: ep groups [0,2] and [1,3]; ep replicas [0,1] (ep rank 0) and [2,3].
// With ep=1 instead, every ep group is a single rank and the ep replica group equals the
// dp group (each rank holds all experts, averaged over dp).
#pragma once

#include <string>
#include <vector>

namespace mt {

struct MeshShape {
  int pp = 1, dp = 1, tp = 1, ep = 1;
  int cp = 1;  // last: {pp, dp, tp, ep} aggregates stay cp-less
  int world() const { return pp * dp * cp * tp; }
};

struct MeshCoord {
  int pp = 0, dp = 0, tp = 0;
  int cp = 0;
  int ep_group = 0;  // dp / ep: which expert-parallel group along dp
  int ep_rank = 0;   // dp % ep: position inside it (which slice of the experts it holds)
};

enum class GroupKind { world, dp, tp, pp, ep, ep_replica, cp, dp_cp };
const char* group_kind_name(GroupKind k);

class Mesh {
 public:
  // Throws RuntimeError (an internal invariant: validate_train_options refuses such layouts
  // before any rank starts) when a size is < 1, pp*dp*cp*tp != world_size, or ep does not
  // divide dp.
  Mesh(const MeshShape& shape, int world_size);

  MeshCoord coord(int rank) const;
  int rank_of(int pp, int dp, int tp, int cp = 0) const;

  // Global ranks (ascending) of the group of kind k that contains rank.
  std::vector<int> members(GroupKind k, int rank) const;
  // Every group of kind k (a partition of the world), ordered by their first member.
  std::vector<std::vector<int>> all_groups(GroupKind k) const;

 private:
  void check_rank(int rank) const;

  MeshShape shape_;
  int world_size_;
};

}  // namespace mt
