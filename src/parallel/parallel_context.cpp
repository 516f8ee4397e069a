#include "parallel/parallel_context.h"

namespace mt {

ParallelContext make_parallel_context(CommWorld& world, const MeshShape& shape) {
  ParallelContext ctx;
  ctx.mesh = Mesh(shape, world.size());
  ctx.shape = shape;
  ctx.rank = world.rank();
  ctx.world_size = world.size();
  ctx.coord = ctx.mesh.coord(ctx.rank);
  ctx.world = world.world();
  auto group = [&](GroupKind k) {
    return world.make_group(ctx.mesh.members(k, ctx.rank), group_kind_name(k));
  };
  ctx.dp = group(GroupKind::dp);
  ctx.tp = group(GroupKind::tp);
  ctx.pp = group(GroupKind::pp);
  ctx.ep = group(GroupKind::ep);
  ctx.ep_replica = group(GroupKind::ep_replica);
  // Without cp no group is added: a cp-less run makes exactly the groups it always made.
  if (shape.cp > 1) {
    ctx.cp = group(GroupKind::cp);
    ctx.dp_cp = group(GroupKind::dp_cp);
  } else {
    ctx.dp_cp = ctx.dp;
  }
  return ctx;
}

}  // namespace mt
