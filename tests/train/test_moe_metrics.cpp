// MoeMetrics (train/moe_metrics.h): under pp x dp every rank ends up with the routing
// metrics of every MoE block of the model, in block order, summed over dp — including
// stages that hold no MoE block — and the aux sums are exact (no float round trip).
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "model/block.h"
#include "model/moe_test_util.h"
#include "parallel/parallel_context.h"
#include "train/moe_metrics.h"

namespace mt {
namespace {

struct Expected {
  std::vector<int64_t> load;
  int64_t assignments = 0, dropped = 0, groups = 0;
  double aux = 0;
};

// layers = 4 split 2 + 2 over pp = 2 stages, dp = 2, two microbatches per rank.
void check(int moe_every, const std::vector<int>& want_blocks) {
  const int N = 16, C = 8, E = 4, pp = 2, dp = 2;
  ModelConfig cfg = moe_test::config(C, E, 2, 1.0f);
  cfg.layers = 4, cfg.moe_every = moe_every;
  std::mutex mu;
  std::map<int, Expected> want;  // block -> sums over its stage's dp ranks
  std::vector<std::vector<MoeStepMetrics>> got(pp * dp);
  std::vector<std::vector<int>> got_blocks(pp * dp);
  std::vector<std::vector<std::string>> lines(pp * dp);
  std::vector<nlohmann::json> records(pp * dp);
  run_local(pp * dp, WorldOptions{.timeout_s = 60}, [&](CommWorld& w) {
    ParallelContext ctx = make_parallel_context(w, MeshShape{pp, dp, 1, 1});
    std::vector<std::unique_ptr<moe_test::Harness>> mine;
    std::vector<MoeLayer*> layers;
    for (int l = 2 * ctx.coord.pp; l < 2 * ctx.coord.pp + 2; ++l)
      if (is_moe_layer(cfg, l)) {
        mine.push_back(std::make_unique<moe_test::Harness>(cfg, ExpertParallelShard{}, N, 1,
                                                           uint64_t(7 + l), l));
        layers.push_back(mine.back()->layer.get());
      }
    MoeMetrics metrics(cfg, layers, ctx.dp.get(), ctx.pp.get());
    for (int step = 0; step < 2; ++step) {  // the second step must not see the first's counts
      metrics.begin_step();
      std::vector<float> y(size_t(N) * C);
      for (auto& m : mine)
        for (int mb = 0; mb < 2; ++mb) {
          auto h = moe_test::random_vec(size_t(N) * C, 5,
                                        uint64_t(1000 * step + 100 * ctx.coord.dp + 10 * mb));
          m->layer->forward(m->slot(), h.data(), y.data(), N);
        }
      metrics.reduce();
    }
    {
      std::lock_guard lock(mu);
      for (auto& m : mine) {
        const MoeStats& st = m->layer->stats();
        Expected& e = want[m->layer->layer()];
        e.load.resize(E, 0);
        for (int x = 0; x < E; ++x) e.load[x] += st.load[x];
        e.assignments += st.assignments;
        e.dropped += st.dropped;
        e.groups += st.groups;
        e.aux += st.aux_sum;  // two terms: the order does not change the sum
      }
    }
    got[ctx.rank] = metrics.layers();
    got_blocks[ctx.rank] = metrics.blocks();
    lines[ctx.rank] = metrics.summary(2);
    metrics.add_to(records[ctx.rank]);
  });
  ASSERT_EQ(want.size(), want_blocks.size());
  for (int r = 0; r < pp * dp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_EQ(got_blocks[r], want_blocks);
    ASSERT_EQ(got[r].size(), want_blocks.size());
    ASSERT_EQ(lines[r].size(), want_blocks.size());
    double aux_total = 0;
    int64_t assignments = 0, dropped = 0;
    for (size_t i = 0; i < want_blocks.size(); ++i) {
      const Expected& e = want[want_blocks[i]];
      const MoeStepMetrics& m = got[r][i];
      EXPECT_EQ(m.expert_load, e.load) << "block " << want_blocks[i];
      EXPECT_EQ(m.assignments, e.assignments);
      EXPECT_EQ(m.assignments, int64_t(dp) * 2 * N * 2);  // dp x microbatches x tokens x k
      EXPECT_EQ(m.dropped, e.dropped);
      EXPECT_EQ(m.groups, 2 * dp);
      EXPECT_NEAR(m.aux_loss, e.aux / double(e.groups), 1e-15);
      EXPECT_NE(lines[r][i].find("moe block " + std::to_string(want_blocks[i]) + " "),
                std::string::npos)
          << lines[r][i];
      aux_total += m.aux_loss;
      assignments += m.assignments;
      dropped += m.dropped;
    }
    EXPECT_GT(dropped, 0) << "capacity 1 should drop some assignments";
    EXPECT_NEAR(records[r]["aux_loss"].get<double>(), aux_total, 1e-15);
    EXPECT_DOUBLE_EQ(records[r]["dropped_frac"].get<double>(),
                     double(dropped) / double(assignments));
    EXPECT_EQ(records[r]["expert_load"].size(), want_blocks.size());
    // Bitwise the same view on every rank.
    EXPECT_EQ(records[r].dump(), records[0].dump());
  }
}

TEST(MoeMetrics, EveryStageContributesItsBlocksInOrder) {
  check(1, {0, 1, 2, 3});
}

TEST(MoeMetrics, StageWithoutMoeBlocksStillTakesPart) {
  check(4, {3});  // stage 0 holds blocks 0-1, neither is MoE
}

TEST(MoeMetrics, DenseModelIsDisabled) {
  ModelConfig cfg;
  MoeMetrics m(cfg, {}, nullptr, nullptr);
  EXPECT_FALSE(m.enabled());
  m.reduce();
  nlohmann::json rec = nlohmann::json::object();
  m.add_to(rec);
  EXPECT_TRUE(rec.empty());
}

}  // namespace
}  // namespace mt
