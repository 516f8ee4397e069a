// A rank's place in the mesh and its communicators, passed explicitly to everything that
// communicates (no globals: the local backend runs many ranks in one process).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/world.h"
#include "parallel/mesh.h"

namespace mt {

struct ParallelContext {
  Mesh mesh{MeshShape{}, 1};
  MeshShape shape;
  MeshCoord coord;
  int rank = 0;  // global
  int world_size = 1;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> dp;          // same (pp, tp), all dp indices: dense gradients
  std::shared_ptr<Communicator> tp;          // same (pp, dp): tensor-parallel matmuls
  std::shared_ptr<Communicator> pp;          // same (dp, tp), all stages: group rank = stage
  std::shared_ptr<Communicator> ep;          // ep consecutive dp ranks: token all-to-all
  std::shared_ptr<Communicator> ep_replica;  // same experts across ep groups: expert grads
  // Context parallelism (--cp > 1; null otherwise): same (pp, dp, tp), all cp indices.
  std::shared_ptr<Communicator> cp;
  // The gradient replicas: same (pp, tp), every dp and cp index. Equals dp when cp == 1.
  std::shared_ptr<Communicator> dp_cp;

  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == shape.pp - 1; }
  // pp-group rank of the next stage (-1 on the last).
  int next_stage() const { return last_stage() ? -1 : coord.pp + 1; }
};

// Checks the shape against the world (RuntimeError: validate_train_options has checked it
// before any rank started) and creates the groups, in the fixed
// order dp, tp, pp, ep, ep_replica, then (cp > 1 only) cp, dp_cp (make_group is collective: every
// rank calls it in the same order). Every rank of the world must call this.
ParallelContext make_parallel_context(CommWorld& world, const MeshShape& shape);

}  // namespace mt
