// DataParallel with expert parallelism under ZeRO 1-3: the ranks of an ep group hold
// different experts at the same flat offsets, so every rank must update its experts in
// full, keep them through the post-optimizer all-gather over dp, and see its own experts
// (never a sum of several ranks') in the global view that checkpoints use.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/parallel_context.h"

namespace mt {
namespace {

void check_experts_stay_on_their_ranks(int dp_size, int ep, int zero) {
  SCOPED_TRACE(str("dp ", dp_size, " ep ", ep, " zero ", zero));
  ModelConfig cfg;
  cfg.layers = 2, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19, cfg.experts = 4;
  run_local(dp_size, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, dp_size, 1, ep});
    TokenDispatcher dispatcher(ctx.ep);
    const ExpertParallelShard shard{ctx.coord.ep_rank, ep, &dispatcher};
    GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 2, shard);
    model.init(3);
    // The initial weights of this rank's table (its own experts), kept before dp takes them.
    const std::vector<float> init(model.params().data(),
                                  model.params().data() + model.table().total());
    DataParallel dp(model, {ctx.dp, zero, /*bucket_mb=*/0.001, ctx.ep, ctx.ep_replica});
    const ParamTable& table = model.table();

    // Every expert element is updated here; every other one by exactly one dp rank (ZeRO 0:
    // by every rank).
    std::vector<char> expert_at(table.total(), 0);
    for (const ParamInfo& info : table.entries())
      if (is_expert_param(info.name))
        std::fill_n(expert_at.begin() + long(info.offset), info.numel, 1);
    std::vector<int> mine(table.total(), 0);
    for (const UpdatePiece& p : dp.update_pieces())
      for (size_t i = 0; i < p.n; ++i) ++mine[p.table_off + i];
    std::vector<int> owners = mine;
    ctx.dp->all_reduce(owners.data(), owners.data(), owners.size(), DType::i32, ReduceOp::sum)
        .wait();
    for (const ParamInfo& info : table.entries()) {
      const bool expert = is_expert_param(info.name);
      for (size_t i = 0; i < info.numel; ++i) {
        ASSERT_EQ(owners[info.offset + i], expert || zero == 0 ? dp_size : 1)
            << info.name << "[" << i << "]";
        if (expert) {
          ASSERT_EQ(mine[info.offset + i], 1) << info.name;
        }
      }
    }

    // An "optimizer" adding 1 to what this rank updates; the gather must keep own experts.
    for (const UpdatePiece& p : dp.update_pieces())
      for (size_t i = 0; i < p.n; ++i) dp.param_storage()[p.param_off + i] += 1.f;
    dp.after_optimizer();
    std::vector<float> params(table.total());
    dp.gather_params(params.data());
    for (const ParamInfo& info : table.entries())
      for (size_t i = 0; i < info.numel; ++i)
        ASSERT_EQ(params[info.offset + i], init[info.offset + i] + 1.f)
            << info.name << "[" << i << "] on dp rank " << ctx.coord.dp;

    // Optimizer state: experts rank-specific, the rest a function of the element only.
    std::vector<float> dense, want(table.total(), 0.f);
    for (size_t k = 0; k < dp.update_pieces().size(); ++k) {
      const UpdatePiece& p = dp.update_pieces()[k];
      for (size_t i = 0; i < p.n; ++i) {
        const size_t e = p.table_off + i;
        const bool expert = expert_at[e];
        want[e] = float(e % 97) + (expert ? 1000.f * float(ctx.coord.ep_rank + 1) : 0.f);
        dense.push_back(want[e]);
      }
    }
    std::vector<float> global(table.total(), -1.f);
    dp.gather_dense(dense.data(), global.data());
    for (const ParamInfo& info : table.entries())
      for (size_t i = 0; i < info.numel; ++i) {
        const size_t e = info.offset + i;
        const bool expert = is_expert_param(info.name);
        ASSERT_EQ(global[e], float(e % 97) + (expert ? 1000.f * float(ctx.coord.ep_rank + 1) : 0.f))
            << info.name << "[" << i << "] on dp rank " << ctx.coord.dp;
      }
    std::vector<float> back(dense.size());
    dp.scatter_dense(global.data(), back.data());
    EXPECT_EQ(back, dense);
  });
}

TEST(DataParallelExperts, ExpertsStayOnTheirRanks) {
  check_experts_stay_on_their_ranks(2, 2, 0);
  check_experts_stay_on_their_ranks(2, 2, 1);
  check_experts_stay_on_their_ranks(4, 2, 1);
  check_experts_stay_on_their_ranks(4, 2, 2);
  check_experts_stay_on_their_ranks(4, 4, 2);
}

// ZeRO 3: each rank keeps its experts whole after its shard and lays them over every gathered
// unit (ParamGathers::Overlay), so the gathers over dp cannot mix the ranks' experts.
TEST(DataParallelExperts, ExpertsStayOnTheirRanksUnderZero3) {
  check_experts_stay_on_their_ranks(2, 2, 3);
  check_experts_stay_on_their_ranks(4, 2, 3);
}

}  // namespace
}  // namespace mt
