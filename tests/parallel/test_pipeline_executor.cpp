// The pipeline executor against one worker: for pp 2 and 4, every schedule, m = p and 2p
// microbatches (2p and 4p for dualpipev, which needs m >= 2p) and uneven stage partitions,
// one step's loss and every gradient (by global name; the tied wte summed between the first
// and the last stage, or held once by stage 0 in DualPipeV's V) must match a single GPT run
// on the same microbatches, and each stage's peak of in-flight microbatches must be what
// the validator predicts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "model/gpt.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/stage_chunks.h"
#include "parallel/pipeline/stage_partition.h"
#include "parallel/pipeline/tied_embedding.h"
#include "schedule/schedule_validator.h"
#include "test_util/rel_diff.h"

namespace mt {
namespace {

constexpr uint64_t kSeed = 7;
constexpr int kB = 2;  // sequences per microbatch

ModelConfig tiny_config(Arch arch = Arch::gpt2) {
  ModelConfig cfg;
  cfg.layers = 4, cfg.dim = 16, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 23;
  cfg.arch = arch;
  return cfg;
}

struct Batch {
  std::vector<int> tokens, targets;  // (m * kB, T)
  Batch(const ModelConfig& cfg, int m) {
    for (int i = 0; i < m * kB * cfg.seq; ++i) {
      tokens.push_back(int(uniform01(11, 1, i) * cfg.vocab));
      targets.push_back(int(uniform01(11, 2, i) * cfg.vocab));
    }
  }
};

using Grads = std::map<std::string, std::vector<float>>;

Grads grads_by_name(GPT& model) {
  Grads g;
  for (const ParamInfo& info : model.table().entries()) {
    const float* p = model.grads().data() + info.offset;
    g[info.name] = std::vector<float>(p, p + info.numel);
  }
  return g;
}

struct Reference {
  double loss_sum = 0;
  Grads grads;
};

// One worker, the same microbatches in the same order.
Reference reference(const ModelConfig& cfg, const Batch& batch, int m, float dloss) {
  set_compute_threads(1);
  GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, kB);
  model.init(kSeed);
  model.zero_grads();
  Reference r;
  const size_t n = size_t(kB) * cfg.seq;
  for (int j = 0; j < m; ++j)
    r.loss_sum += model.train_microbatch(batch.tokens.data() + j * n, batch.targets.data() + j * n,
                                         kB, cfg.seq, dloss);
  r.grads = grads_by_name(model);
  return r;
}

struct Case {
  int p;
  std::string schedule;
  int m;
  int v = 1;
  std::string stage_layers;  // empty: partition_layers
  int lookahead = 2;         // receives posted this many compute actions ahead
  Arch arch = Arch::gpt2;    // llama: an untied head (its own lm_head.weight)
};

std::string case_name(const Case& c) {
  return str("pp ", c.p, " ", c.schedule, " m ", c.m, " v ", c.v,
             c.stage_layers.empty() ? "" : " layers " + c.stage_layers, " ", arch_name(c.arch));
}

// Every schedule at m = p and 2p; dualpipev, which needs m >= 2p, at 2p and 4p.
std::vector<Case> every_schedule(int p) {
  std::vector<Case> cases;
  for (const std::string& name : schedule_names()) {
    const int m0 = name == "dualpipev" ? 2 * p : p;
    for (int m : {m0, 2 * m0})
      cases.push_back(
          {p, name, m, chunks_per_stage(schedule_kind(name), name == "interleaved" ? 2 : 1), ""});
  }
  return cases;
}

struct StageResult {
  double loss_sum = 0;
  Grads grads;
  PipelineStepStats stats;
  int pool_peak = 0;  // activation slots of local chunk 0
  std::vector<std::string> events;
  std::vector<int> weight_grad_calls;  // per (mb, chunk): before_weight_grads calls
};

// Runs `steps` executor steps per stage (gradients accumulate) and collects every stage.
std::vector<StageResult> run_pipeline(const Case& c, const ModelConfig& cfg, const Batch& batch,
                                      float dloss, int steps = 1) {
  std::vector<StageResult> out(c.p);
  run_local(c.p, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{c.p, 1, 1, 1});
    const int stage = ctx.coord.pp, K = c.p * c.v;
    const std::vector<int> layers = c.stage_layers.empty()
                                        ? partition_layers(cfg.layers, K, PartitionCost{})
                                        : parse_stage_layers(c.stage_layers, cfg.layers, K);
    GPT model(cfg, stage_chunk_specs(layers, c.p, stage, placement_of(schedule_kind(c.schedule))),
              TensorParallelShard{}, kB);
    model.init(kSeed);
    model.zero_grads();
    std::vector<ModelChunk*> chunks;
    for (int i = 0; i < model.num_chunks(); ++i) chunks.push_back(&model.chunk(i));
    PipelineExecutor ex(make_schedule(c.schedule, c.p, c.m, c.v), stage, chunks, *ctx.pp,
                        PipelineShape{kB, cfg.seq, cfg.dim});
    StageResult& r = out[stage];
    ex.set_recv_lookahead(c.lookahead);
    r.weight_grad_calls.assign(size_t(c.m) * c.v, 0);
    ex.set_before_weight_grads([&](int mb, int chunk) { ++r.weight_grad_calls[mb * c.v + chunk]; });
    auto sink = [&](const std::string& name, const char*, double begin, double end) {
      EXPECT_LE(begin, end);
      r.events.push_back(name);
    };
    for (int s = 0; s < steps; ++s) {
      r.stats = ex.run(batch.tokens.data(), batch.targets.data(), dloss, sink);
      r.loss_sum += r.stats.loss_sum;
    }
    // The V holds the embedding and the head on stage 0: one wte, nothing to exchange.
    const bool v_shape = placement_of(schedule_kind(c.schedule)) == ChunkPlacement::v_shape;
    if ((ctx.first_stage() || ctx.last_stage()) && cfg.tied() && !v_shape) {
      const ParamInfo& wte = model.table().at(cfg.token_table_name());
      sum_tied_embedding_grad(*ctx.pp, model.grads().data() + wte.offset, wte.numel);
    }
    r.grads = grads_by_name(model);
    r.pool_peak = model.chunk(0).pool().peak_slots();
  });
  return out;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  return test_util::max_rel_diff(a.data(), b.data(), b.size());
}

void check_case(const Case& c) {
  SCOPED_TRACE(case_name(c));
  const ModelConfig cfg = tiny_config(c.arch);
  const Batch batch(cfg, c.m);
  const float dloss = float(1.0 / (double(c.m) * kB * cfg.seq));
  const Reference ref = reference(cfg, batch, c.m, dloss);
  const std::vector<StageResult> stages = run_pipeline(c, cfg, batch, dloss);
  const Schedule sched = make_schedule(c.schedule, c.p, c.m, c.v);
  const int K = sched.model_chunks(), head_stage = sched.stage_of(K - 1);

  // Loss: only the stage holding the head computes it.
  for (int s = 0; s < c.p; ++s)
    EXPECT_TRUE(s == head_stage || stages[s].loss_sum == 0.0) << "stage " << s;
  EXPECT_NEAR(stages[head_stage].loss_sum, ref.loss_sum, 1e-5 * std::fabs(ref.loss_sum));

  // Gradients by global name: every tensor on exactly one stage, a tied wte on the first
  // and the last (after the tied sum, both equal the whole gradient) unless one stage
  // holds both ends.
  std::map<std::string, int> holders;
  for (int s = 0; s < c.p; ++s)
    for (const auto& [name, g] : stages[s].grads) {
      ++holders[name];
      ASSERT_TRUE(ref.grads.count(name)) << name;
      const std::vector<float>& want = ref.grads.at(name);
      ASSERT_EQ(g.size(), want.size()) << name;
      EXPECT_LE(rel_diff(g, want), 1e-5) << name << " on stage " << s;
    }
  const bool two_copies = cfg.tied() && head_stage != 0;
  for (const auto& [name, g] : ref.grads)
    EXPECT_EQ(holders[name], name == cfg.token_table_name() && two_copies ? 2 : 1) << name;

  // Activation memory and trace events per stage.
  const ValidationReport report = validate_schedule(sched);
  for (int s = 0; s < c.p; ++s) {
    const StageResult& r = stages[s];
    EXPECT_EQ(r.stats.peak_in_flight, report.peak_in_flight[s]) << "stage " << s;
    // The closed forms (schedule_validator.h), beside the validator's count.
    int want = report.peak_in_flight[s];
    if (c.schedule == "gpipe") want = c.m;
    if (c.schedule == "1f1b") want = std::min(c.p - s, c.m);
    if (c.schedule == "zb-h1" && s == 0) want = std::min(c.p, c.m);
    if (c.schedule == "dualpipev") want = 2 * c.p + 1;
    EXPECT_EQ(r.stats.peak_in_flight, want) << "stage " << s;
    EXPECT_LE(r.stats.peak_in_flight, c.schedule == "zb-h1" ? std::min(c.p, c.m) : c.m * c.v);
    // One slot per in-flight microbatch: the pool never grew beyond the peak.
    EXPECT_TRUE(c.v > 1 || r.pool_peak == r.stats.peak_in_flight) << "stage " << s;

    EXPECT_GT(r.stats.busy_seconds, 0);
    EXPECT_LE(r.stats.busy_seconds, r.stats.step_seconds);  // this rank's idle >= 0
    size_t fbs = 0;
    for (const Action& a : sched.actions[s]) fbs += a.kind == ActionKind::FB;
    EXPECT_EQ(r.events.size(), sched.actions[s].size() + fbs) << "one event per action or half";
    for (int n : r.weight_grad_calls) EXPECT_EQ(n, 1);
    const std::set<std::string> names(r.events.begin(), r.events.end());
    for (int ch = 0; ch < c.v; ++ch) {
      const int k = sched.model_chunk(s, ch);
      const bool from_afar = k > 0 && sched.stage_of(k - 1) != s;
      const bool to_afar = k + 1 < K && sched.stage_of(k + 1) != s;
      for (int mb = 0; mb < c.m; ++mb) {
        EXPECT_TRUE(names.count(str(k, "F", mb))) << k << "F" << mb;
        EXPECT_TRUE(names.count(str(k, "B", mb))) << k << "B" << mb;
        EXPECT_EQ(names.count(str(k, "W", mb)), sched.split_backward ? 1u : 0u);
        EXPECT_EQ(names.count(str(k, "RECV_F", mb)), from_afar ? 1u : 0u);
        EXPECT_EQ(names.count(str(k, "SEND_F", mb)), to_afar ? 1u : 0u);
      }
    }
  }
}

TEST(PipelineExecutor, MatchesOneWorkerForEverySchedule) {
  for (int p : {2, 4})
    for (const Case& c : every_schedule(p)) check_case(c);
}

TEST(PipelineExecutor, UnevenStagePartitions) {
  check_case({2, "1f1b", 4, 1, "3,1"});
  check_case({2, "zb-h1", 2, 1, "0,4"});
  check_case({4, "gpipe", 4, 1, "2,0,1,1"});
  check_case({2, "interleaved", 4, 2, "1,2,0,1"});
  // The V: model chunks 0 and 3 on stage 0 (the head's chunk without blocks), 1 and 2 on 1.
  check_case({2, "dualpipev", 4, 2, "1,2,1,0"});
  check_case({2, "dualpipev", 5, 2, "0,1,1,2"});
}

// An untied head (llama's lm_head.weight) and the embedding on stage 0 of the V.
TEST(PipelineExecutor, DualPipeVWithAnUntiedHead) {
  Case c{2, "dualpipev", 4, 2, ""};
  c.arch = Arch::llama;
  check_case(c);
  c.p = 4, c.m = 8;
  check_case(c);
}

TEST(PipelineExecutor, AnyReceiveLookaheadGivesTheSameResult) {
  for (int lookahead : {0, 1, 100}) {
    check_case({4, "1f1b", 8, 1, "", lookahead});
    check_case({2, "interleaved", 4, 2, "", lookahead});
    check_case({4, "dualpipev", 8, 2, "", lookahead});
  }
}

// An F&B pair runs as its F half, the F half's send, the B half's receive, the B half: the
// order the trace records on every stage (execution_order.h).
TEST(PipelineExecutor, DualPipeVOverlapsEachHalfsTransferWithTheOtherHalf) {
  const Case c{4, "dualpipev", 8, 2, ""};
  const ModelConfig cfg = tiny_config();
  const Batch batch(cfg, c.m);
  const std::vector<StageResult> stages = run_pipeline(c, cfg, batch, 0.01f);
  const Schedule sched = make_schedule(c.schedule, c.p, c.m, c.v);
  for (int s = 0; s < c.p; ++s) {
    const std::vector<std::string>& ev = stages[s].events;
    int checked = 0;
    for (const Action& a : sched.actions[s]) {
      if (a.kind != ActionKind::FB) continue;
      const int kf = sched.model_chunk(s, a.chunk), kb = sched.model_chunk(s, a.b_chunk);
      const auto at = [&](const std::string& name) {
        return std::find(ev.begin(), ev.end(), name) - ev.begin();
      };
      const long f = at(str(kf, "F", a.microbatch)), b = at(str(kb, "B", a.b_microbatch));
      ASSERT_LT(f, long(ev.size()));
      ASSERT_LT(b, long(ev.size()));
      const long send = at(str(kf, "SEND_F", a.microbatch));
      const long recv = at(str(kb, "RECV_B", a.b_microbatch));
      const long none = long(ev.size());
      EXPECT_TRUE(send == none || (f < send && send < b)) << to_string(a);
      EXPECT_TRUE(recv == none || (f < recv && recv < b)) << to_string(a);
      checked += send < long(ev.size()) || recv < long(ev.size());
    }
    EXPECT_GT(checked, 0) << "stage " << s;
  }
}

TEST(PipelineExecutor, BuffersAndSlotsAreReusedAcrossSteps) {
  const Case c{2, "zb-h1", 4, 1, ""};
  const ModelConfig cfg = tiny_config();
  const Batch batch(cfg, c.m);
  const float dloss = float(1.0 / (double(c.m) * kB * cfg.seq));
  const Reference ref = reference(cfg, batch, c.m, dloss);
  const std::vector<StageResult> stages = run_pipeline(c, cfg, batch, dloss, /*steps=*/2);
  EXPECT_NEAR(stages.back().loss_sum, 2 * ref.loss_sum, 2e-5 * std::fabs(ref.loss_sum));
  for (const StageResult& r : stages) {
    EXPECT_EQ(r.pool_peak, r.stats.peak_in_flight);  // the second step allocated nothing new
    for (const auto& [name, g] : r.grads) {
      std::vector<float> twice = ref.grads.at(name);
      for (float& x : twice) x *= 2;
      EXPECT_LE(rel_diff(g, twice), 1e-5) << name;
    }
  }
}

TEST(PipelineExecutor, MismatchedHeaderIsAClearError) {
  // Stage 1 expects microbatches of 1 x 16 tokens, stage 0 sends 2 x 8: the same payload
  // size, so only the header can tell.
  try {
    run_local(2, WorldOptions{5, false}, [&](CommWorld& w) {
      set_compute_threads(1);
      ParallelContext ctx = make_parallel_context(w, MeshShape{2, 1, 1, 1});
      const int stage = ctx.coord.pp;
      ModelConfig cfg = tiny_config();
      const int b = stage == 0 ? 2 : 1;
      cfg.seq = stage == 0 ? 8 : 16;
      GPT model(cfg, stage_chunk_specs({2, 2}, 2, stage), TensorParallelShard{}, b);
      model.init(kSeed);
      std::vector<ModelChunk*> chunks{&model.chunk(0)};
      PipelineExecutor ex(make_schedule("1f1b", 2, 2, 1), stage, chunks, *ctx.pp,
                          PipelineShape{b, cfg.seq, cfg.dim});
      const Batch batch(cfg, 2);
      ex.run(batch.tokens.data(), batch.targets.data(), 0.01f);
    });
    FAIL() << "expected a RuntimeError";
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pipeline stage 1"), std::string::npos) << what;
    EXPECT_NE(what.find("header says activation of microbatch 0 for model chunk 1, b 2 T 8"),
              std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace mt
