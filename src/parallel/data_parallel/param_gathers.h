// ZeRO-3 parameter gathers (docs/data_parallel.md, "ZeRO-3").
//
// Each unit lives only as this rank's chunk of its bucket (every unit is a bucket at
// stage 3). Just before a unit is used, its parameters are all-gathered from the shards
// into a buffer, and the next unit's gather is issued (prefetched) while it computes.
// Each chunk with a non-empty edge unit has its own buffer for it, held through the step
// (the tied head needs it at both ends of the chunk's pass: under pp at most one per
// rank, the embedding's or the head's); the blocks take turns in two buffers, which hold
// any chunk's unit. Prefetch hints stay within a chunk (the first unit of the next chunk
// to run is gathered on demand). Parameters change only at the optimizer step, so a
// buffer keeps a valid copy until it is reused: a block used again before its buffer is
// needed (the last block's forward, then its backward) is not gathered twice.
//
// Expert parallelism: the ranks of an ep group hold different experts at the same flat
// offsets, so what a gather brings there is a mix of theirs. Each rank keeps its own
// experts whole (packed after its shard, DataParallel) and lays them over the gathered unit
// (Overlay) once its gather has completed, before anyone reads it.
#pragma once

#include <array>
#include <vector>

#include "comm/communicator.h"
#include "core/arena.h"
#include "parallel/data_parallel/exposed_time.h"
#include "parallel/data_parallel/flat_layout.h"

namespace mt {

class ParamGathers {
 public:
  // n floats at flat offset `flat` are this rank's own, at src.
  struct Overlay {
    size_t flat, n;
    const float* src;
  };
  // shard: this rank's parameter shard (layout.shard_size() floats), read by the gathers.
  ParamGathers(const FlatLayout& layout, Communicator& dp, const float* shard, ExposedTime& exposed,
               std::vector<Overlay> overlays = {});
  // What the constructor allocates for a layout, in floats: each chunk's edge buffer (0
  // for an empty edge unit), then the two block buffers. The memory estimate asks it.
  static std::vector<size_t> buffer_floats(const FlatLayout& layout);
  ~ParamGathers();  // waits for the gathers in flight
  ParamGathers(const ParamGathers&) = delete;
  ParamGathers& operator=(const ParamGathers&) = delete;

  // The unit's gathered parameters (its padded flat unit), waiting for its gather if
  // needed, in use until release(unit); issues next_unit's gather (-1: none) if a buffer
  // is free for it.
  float* use(int unit, int next_unit);
  // The unit's parameters are not needed until its next use: its block buffer may be
  // reused (the edge buffers stay held).
  void release(int unit);
  // Forgets every gathered copy (the shards changed, or an evaluation is over).
  void drop_all();
  // Tests the gathers in flight (Open MPI progresses only inside MPI calls).
  void poll();
  size_t bytes() const;

 private:
  struct Slot {
    int unit = -1;  // unit whose parameters the buffer holds (or is receiving)
    bool in_use = false;
    bool overlaid = false;  // the overlays are in (after the gather completed)
    Work work;
    Arena buf;
  };
  Slot* find(int unit);
  Slot* issue(int unit);
  void overlay(Slot& s) const;

  const FlatLayout& layout_;
  Communicator& dp_;
  const float* shard_;
  ExposedTime& exposed_;
  std::vector<Overlay> overlays_;
  std::vector<Slot> edges_;  // per chunk (a buffer only for non-empty edge units)
  std::array<Slot, 2> blocks_;
};

}  // namespace mt
