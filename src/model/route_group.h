// The ranks that route one aux/capacity group together (docs/contracts.md §1, §9a, §11), and
// the order of the group's tokens across them.
//
// A group is one microbatch of one dp index: b sequences of T tokens, in token order
// (sequence, position). Its tokens may be spread over
//   tp  tensor parallelism's token split: tp rank t routes run t of the cp rank's rows
//       (model/moe_layer.h);
//   cp  context parallelism: cp rank r holds chunks r and 2N-1-r of every sequence
//       (model/zigzag_layout.h).
// So a rank's rows are a few runs of consecutive group tokens ("segments"): one under tp
// alone; under cp up to two per sequence (fewer or more where tp's runs cut the chunks).
//
// What must be the whole group's is made so by one all-gather over tp and then one over cp
// per forward, of each rank's choice counts per segment (with the segment's first token) and
// score shares: E + S*(1+E) doubles, S bounded by the rows (no f64 in the communicators: as
// bytes). Identical on every rank of the group:
//   counts  the group's choices per expert (the aux loss's f)
//   shares  the group's score shares, added in group rank order (cp major, tp minor: tp alone
//           adds exactly as before cp existed)
//   held    per segment of this rank, each expert's choices by the other ranks' tokens that
//           come before the segment: the capacity drops then keep the group's first
//           `capacity` choices of every expert in token order (plan_dispatch), as one rank
//           holding the whole group does.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/router.h"
#include "kernels/token_permutation.h"
#include "model/context_parallel_shard.h"
#include "tensor_parallel/tensor_parallel_shard.h"

namespace mt {

struct RouteSums {
  std::vector<int64_t> counts;       // (E)
  std::vector<double> shares;        // (E)
  std::vector<int64_t> held;         // (segments, E)
  std::vector<int32_t> segment_end;  // (segments): end of each in this rank's rows
  // None when the group is this rank's alone.
  HeldChoices held_choices() const {
    if (held.empty()) return {};
    return {held.data(), segment_end.data(), int(segment_end.size())};
  }
};

class RouteGroup {
 public:
  // seq_rows: rows of one sequence on this cp rank (T / cp).
  RouteGroup(const TensorParallelShard& tp, const ContextParallelShard& cp, int seq_rows);

  // Whether the group has other ranks (then sum() communicates).
  bool shared() const { return tp_.size * cp_.size > 1; }
  // The group's tokens when every rank routes `rows` rows.
  int64_t tokens(int rows) const { return int64_t(rows) * tp_.size * cp_.size; }

  // The group's sums from this rank's `rows` rows: experts (rows, k), scores (rows, E).
  // Collective over tp, then cp (each of more than one rank).
  void sum(RouteSums& out, const int32_t* experts, const float* scores, int rows, int E, int k,
           RouterScore score) const;

 private:
  struct Segment {
    int64_t first;  // the group token index of its first row
    int32_t end;    // end (exclusive) in this rank's rows
  };
  std::vector<Segment> segments(int rows) const;
  int max_segments(int rows) const;
  std::vector<double> gather(std::vector<double> mine) const;

  TensorParallelShard tp_;
  ContextParallelShard cp_;
  int seq_rows_;
  std::vector<int> positions_;  // (seq_rows) true positions of this cp rank's rows
};

}  // namespace mt
