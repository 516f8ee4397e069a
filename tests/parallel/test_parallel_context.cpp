#include "parallel/parallel_context.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace mt {
namespace {

TEST(ParallelContext, GroupsMatchTheMesh) {
  const MeshShape shape{2, 2, 2, 2};
  run_local(8, WorldOptions{}, [&](CommWorld& w) {
    ParallelContext ctx = make_parallel_context(w, shape);
    const Mesh mesh(shape, 8);
    EXPECT_EQ(ctx.rank, w.rank());
    EXPECT_EQ(ctx.coord.pp, mesh.coord(w.rank()).pp);
    const std::pair<Communicator*, GroupKind> groups[] = {
        {ctx.dp.get(), GroupKind::dp},
        {ctx.tp.get(), GroupKind::tp},
        {ctx.pp.get(), GroupKind::pp},
        {ctx.ep.get(), GroupKind::ep},
        {ctx.ep_replica.get(), GroupKind::ep_replica}};
    for (auto [c, kind] : groups) {
      const auto members = mesh.members(kind, w.rank());
      ASSERT_EQ(c->size(), int(members.size()));
      for (int i = 0; i < c->size(); ++i) EXPECT_EQ(c->global_rank(i), members[i]);
      int64_t x = w.rank(), want = 0;
      for (int m : members) want += m;
      c->all_reduce(&x, &x, 1, DType::i64, ReduceOp::sum).wait();
      EXPECT_EQ(x, want) << group_kind_name(kind);
    }
    EXPECT_EQ(ctx.pp->rank(), ctx.coord.pp);
    EXPECT_EQ(ctx.next_stage(), ctx.last_stage() ? -1 : ctx.coord.pp + 1);
  });
}

// A wrong shape never reaches a rank (validate_train_options); here it is an internal error.
TEST(ParallelContext, WrongShapeIsAnInternalError) {
  EXPECT_THROW(run_local(4, WorldOptions{},
                         [](CommWorld& w) {
                           make_parallel_context(w, MeshShape{1, 3, 1, 1});
                         }),
               RuntimeError);
}

}  // namespace
}  // namespace mt
