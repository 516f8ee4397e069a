// The dry run of the model's constructors (model/dry_model.h) against the same chunks
// built for real, with their memory: every figure of every chunk equal, for dense and MoE
// blocks, each recomputation mode and precision, tensor and expert parallelism, and the
// chunks a pipeline stage holds. One block of each kind stands for the others in the dry
// run, so these also check that blocks of one kind hold the same sizes.
#include "model/dry_model.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "model/gpt.h"

namespace mt {
namespace {

// The ep group a real MoE layer checks its place in; construction never exchanges.
class PlaceOnly final : public TokenExchange {
 public:
  explicit PlaceOnly(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void exchange_counts(const int32_t*, int32_t*, int) override { FAIL(); }
  void dispatch(float*, const float*, float*, const ExchangeCounts&, int) override { FAIL(); }
  void combine(float*, const float*, float*, const ExchangeCounts&, int) override { FAIL(); }

 private:
  int size_;
};

// Rank 0's chunks built as the session builds them: GPT, with its arenas.
RankFootprint real_rank(const ModelConfig& cfg, const DryModelShape& s,
                        const std::vector<ChunkSpec>& chunks) {
  PlaceOnly exchange(s.ep);
  const TensorParallelShard tp{0, s.tp, nullptr, s.tp > 1 && s.sequence_parallel};
  const ExpertParallelShard ep{0, s.ep, s.ep > 1 ? &exchange : nullptr};
  GPT model(cfg, chunks, tp, s.max_b, ep, s.recompute, s.precision);
  RankFootprint r;
  for (int c = 0; c < model.num_chunks(); ++c) r.chunks.push_back(model.chunk(c).footprint());
  if (const ParamInfo* wte = model.table().find("transformer.wte.weight"))
    r.tied_embedding_numel = wte->numel;
  return r;
}

void expect_equal(const RankFootprint& dry, const RankFootprint& real, const std::string& name) {
  EXPECT_EQ(dry.tied_embedding_numel, real.tied_embedding_numel) << name;
  ASSERT_EQ(dry.chunks.size(), real.chunks.size()) << name;
  for (size_t c = 0; c < dry.chunks.size(); ++c) {
    const ChunkFootprint &d = dry.chunks[c], &r = real.chunks[c];
    const std::string at = name + ", chunk " + std::to_string(c);
    EXPECT_EQ(d.slot_floats, r.slot_floats) << at;
    EXPECT_EQ(d.workspace_floats, r.workspace_floats) << at;
    EXPECT_EQ(d.bf16_weight_bytes, r.bf16_weight_bytes) << at;
    ASSERT_EQ(d.units.size(), r.units.size()) << at;
    for (size_t u = 0; u < d.units.size(); ++u) {
      EXPECT_EQ(d.units[u].floats, r.units[u].floats) << at << ", unit " << u;
      EXPECT_EQ(d.units[u].real, r.units[u].real) << at << ", unit " << u;
      EXPECT_EQ(d.units[u].expert_real, r.units[u].expert_real) << at << ", unit " << u;
    }
  }
}

ModelConfig small_model() {
  ModelConfig cfg;
  cfg.layers = 6, cfg.dim = 32, cfg.heads = 4, cfg.seq = 16, cfg.vocab = 75;
  return cfg;
}

ModelConfig small_moe(int every) {
  ModelConfig cfg = small_model();
  cfg.experts = 4, cfg.topk = 2, cfg.moe_every = every;
  return cfg;
}

// The llama block (GQA 2:1, untied head, SwiGLU of 48).
ModelConfig small_llama() {
  ModelConfig cfg = small_model();
  cfg.arch = Arch::llama, cfg.kv_heads = 2, cfg.ffn_dim = 48;
  return cfg;
}

struct Case {
  const char* name;
  ModelConfig cfg;
  DryModelShape shape;
};

DryModelShape shape(int tp, bool sp, int ep, Recompute r, Precision p) {
  DryModelShape s;
  s.tp = tp, s.sequence_parallel = sp, s.ep = ep, s.max_b = 2, s.recompute = r, s.precision = p;
  return s;
}

TEST(DryModel, EveryFigureEqualsTheRealChunks) {
  using R = Recompute;
  using P = Precision;
  const std::vector<Case> cases = {
      {"dense", small_model(), shape(1, false, 1, R::none, P::fp32)},
      {"dense selective", small_model(), shape(1, false, 1, R::selective, P::fp32)},
      {"dense full", small_model(), shape(1, false, 1, R::full, P::fp32)},
      {"tp 2", small_model(), shape(2, false, 1, R::none, P::fp32)},
      {"tp 2 sp full", small_model(), shape(2, true, 1, R::full, P::fp32)},
      {"bf16", small_model(), shape(1, false, 1, R::none, P::bf16)},
      {"bf16 tp 2 sp selective", small_model(), shape(2, true, 1, R::selective, P::bf16)},
      {"bf16 full", small_model(), shape(1, false, 1, R::full, P::bf16)},
      {"moe every 1", small_moe(1), shape(1, false, 1, R::none, P::fp32)},
      {"moe every 2 ep 2 selective", small_moe(2), shape(1, false, 2, R::selective, P::fp32)},
      {"bf16 moe every 2", small_moe(2), shape(1, false, 1, R::none, P::bf16)},
      {"bf16 moe every 1 ep 2", small_moe(1), shape(1, false, 2, R::none, P::bf16)},
      {"llama", small_llama(), shape(1, false, 1, R::none, P::fp32)},
      {"llama tp 2 sp full", small_llama(), shape(2, true, 1, R::full, P::fp32)},
      {"llama bf16 tp 2 sp", small_llama(), shape(2, true, 1, R::none, P::bf16)},
  };
  // The whole model; one pipeline stage's middle chunk; an interleaved stage holding the
  // embedding's chunk and the head's (one wte between them) and a chunk without blocks.
  const std::vector<std::vector<ChunkSpec>> ranks = {
      GPT::whole_model(small_model()),
      {ChunkSpec{2, 4, false, false}},
      {ChunkSpec{0, 2, true, false}, ChunkSpec{3, 6, false, true}},
      {ChunkSpec{0, 0, true, false}, ChunkSpec{1, 3, false, false}},
  };
  for (const Case& c : cases)
    for (size_t k = 0; k < ranks.size(); ++k) {
      DryModel dry(c.cfg, c.shape);
      const std::string name = std::string(c.name) + ", rank " + std::to_string(k);
      expect_equal(dry.rank(ranks[k]), real_rank(c.cfg, c.shape, ranks[k]), name);
      // A dry model answers again for other chunks with the stand-ins it already has.
      expect_equal(dry.rank(ranks[0]), real_rank(c.cfg, c.shape, ranks[0]), name + " again");
    }
}

// A 175B-parameter model runs dry in an instant and holds every parameter once: the stand-in
// blocks count for all 96 layers (and nothing of the model is allocated).
TEST(DryModel, ALargeModelCountsEveryParameterWithoutAllocating) {
  ModelConfig cfg;
  cfg.layers = 96, cfg.dim = 12288, cfg.heads = 96, cfg.seq = 2048, cfg.vocab = 51200;
  for (int experts : {0, 8}) {
    cfg.experts = experts, cfg.moe_every = 2;
    DryModelShape s;
    s.max_b = 1, s.precision = Precision::bf16;
    DryModel dry(cfg, s);
    const RankFootprint rank = dry.rank(GPT::whole_model(cfg));
    size_t real = 0;
    for (const UnitSize& u : rank.chunks[0].units) real += u.real;
    EXPECT_EQ(int64_t(real), cfg.num_params()) << experts << " experts";
  }
}

TEST(DryModel, RefusesWhatGptRefuses) {
  ModelConfig cfg = small_model();
  cfg.heads = 5;  // does not divide dim
  EXPECT_THROW(DryModel(cfg, DryModelShape{}), UsageError);
}

}  // namespace
}  // namespace mt
