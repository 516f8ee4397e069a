// The whole model on rank 0 (train/global_view.h): tensors spread over pipeline stages and
// expert-parallel ranks come back whole, once each, in the order of the one-worker table.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "model/gpt.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/stage_chunks.h"
#include "train/global_view.h"

namespace mt {
namespace {

ModelConfig moe_config() {
  ModelConfig c;
  c.layers = 4;
  c.dim = 16;
  c.heads = 2;
  c.seq = 8;
  c.vocab = 32;
  c.experts = 4;
  c.topk = 2;
  c.moe_every = 2;  // blocks 1 and 3
  return c;
}

TEST(GlobalView, WholeModelTableIsTheOneWorkerTable) {
  const ModelConfig cfg = moe_config();
  const ParamTable whole = whole_model_table(cfg);
  GPT one(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  ASSERT_EQ(whole.entries().size(), one.table().entries().size());
  for (size_t i = 0; i < whole.entries().size(); ++i) {
    EXPECT_EQ(whole.entries()[i].name, one.table().entries()[i].name);
    EXPECT_EQ(whole.entries()[i].global_shape, one.table().entries()[i].global_shape);
  }
  EXPECT_EQ(router_bias_names(whole),
            (std::vector<std::string>{"transformer.h.1.mlp.router.expert_bias",
                                      "transformer.h.3.mlp.router.expert_bias"}));
}

// Rank r holds tensor i when bit i of holds[r] is set, with the value 100 * r + i; rank 0
// must get each tensor from the lowest rank holding it.
TEST(GlobalView, EachTensorComesFromItsLowestHolder) {
  const std::vector<unsigned> holds = {0b00001, 0b00110, 0b01100, 0b11001};
  const int n = int(holds.size());
  const std::vector<std::string> name = {"t0", "t1", "t2", "t3", "t4"};
  std::vector<LeadGather::Tensor> whole;
  for (int i = 0; i < 5; ++i) whole.push_back({name[size_t(i)], size_t(i + 1)});
  run_local(n, {}, [&](CommWorld& w) {
    const int r = w.rank();
    std::vector<std::string> names;
    GlobalTensors mine;
    for (int i = 4; i >= 0; --i)  // a held order unlike the whole order
      if (holds[size_t(r)] >> i & 1) {
        names.push_back(name[size_t(i)]);
        mine.emplace_back(size_t(i + 1), float(100 * r + i));
      }
    LeadGather g(whole, names, *w.world());
    const GlobalTensors got = g.to_lead(mine);
    if (r != 0) {
      EXPECT_TRUE(got.empty());
      return;
    }
    const std::vector<int> owner = {0, 1, 1, 2, 3};
    ASSERT_EQ(got.size(), 5u);
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(got[size_t(i)], std::vector<float>(size_t(i + 1), float(100 * owner[i] + i)))
          << name[size_t(i)];
  });
}

TEST(GlobalView, ATensorNobodyHoldsFailsEveryRank) {
  std::vector<LeadGather::Tensor> whole = {{"a", 1}, {"b", 1}};
  EXPECT_THROW(run_local(2, {}, [&](CommWorld& w) { LeadGather g(whole, {"a"}, *w.world()); }),
               RuntimeError);
}

// pp 2 x ep 2 (4 ranks, rank = stage * 2 + ep_rank): every stage holds its blocks, the
// last stage a copy of wte, each ep rank two of the four experts. Init depends only on
// (seed, name, element), so rank 0 must end with exactly the one-worker model.
TEST(GlobalView, PipelineStagesAndExpertsGatherToTheWholeModel) {
  const ModelConfig cfg = moe_config();
  GPT one(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  one.init(7);
  std::mutex mu;
  run_local(4, {}, [&](CommWorld& w) {
    ParallelContext ctx = make_parallel_context(w, MeshShape{2, 2, 1, 2});
    TokenDispatcher dispatcher(ctx.ep);
    const int stage = ctx.coord.pp;
    const auto chunks = stage_chunk_specs(resolve_stage_layers(cfg, 2, 1, "2,2"), 2, stage);
    GPT model(cfg, chunks, TensorParallelShard{}, 1,
              ExpertParallelShard{ctx.coord.ep_rank, 2, &dispatcher});
    model.init(7);
    const std::vector<MoeLayer*> moe = model.moe_layers();
    for (size_t i = 0; i < moe.size(); ++i)  // layer of stage s: index s in the whole model
      for (float& b : moe[i]->router_bias()) b = float(10 * stage + int(i) + 1);
    GlobalView view(cfg, model.table(), moe, *w.world());
    const GlobalTensors got =
        view.to_lead(assemble_global(model.table(), model.params().data(), nullptr));
    const std::vector<NamedTensor> biases = view.router_biases_to_lead();
    if (w.rank() != 0) return;
    std::lock_guard<std::mutex> lock(mu);
    const auto& want = one.table().entries();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const float* p = one.params().data() + want[i].offset;
      EXPECT_EQ(got[i], std::vector<float>(p, p + want[i].numel)) << want[i].name;
    }
    ASSERT_EQ(biases.size(), 2u);
    EXPECT_EQ(biases[0].name, "transformer.h.1.mlp.router.expert_bias");
    EXPECT_EQ(biases[0].data, std::vector<float>(4, 1.f));
    EXPECT_EQ(biases[1].data, std::vector<float>(4, 11.f));
  });
}

}  // namespace
}  // namespace mt
