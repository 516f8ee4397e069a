#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/gpt.h"
#include "model/param_table.h"

namespace mt {
namespace {

TEST(ParamTable, OffsetsAreAlignedAndDisjoint) {
  ParamTable t;
  t.add("a", {3, 5}, InitKind::normal);
  t.add("b", {7}, InitKind::zeros);
  t.add("c", {2, 2, 2}, InitKind::ones);
  size_t end = 0;
  for (const auto& p : t.entries()) {
    EXPECT_EQ(p.offset % 16, 0u) << p.name;
    EXPECT_GE(p.offset, end) << p.name;
    end = p.offset + p.numel;
  }
  EXPECT_EQ(t.numel(), 15u + 7u + 8u);
  EXPECT_GE(t.total(), end);
}

TEST(ParamTable, ShardedElementsMapIntoTheGlobalTensor) {
  // A [6, 2] tensor whose local piece is rows {1} and {4, 5} (and one padding row 6).
  ParamTable t;
  const ParamInfo& p = t.add("w", {6, 2}, InitKind::normal, 0.02f, ShardSpec{0, {{1, 1}, {4, 3}}});
  EXPECT_EQ(p.local_shape, (std::vector<int64_t>{4, 2}));
  std::vector<std::pair<size_t, int64_t>> seen;
  p.for_each_element([&](size_t l, int64_t g) { seen.push_back({l, g}); });
  std::vector<std::pair<size_t, int64_t>> want = {{0, 2}, {1, 3}, {2, 8}, {3, 9}, {4, 10}, {5, 11}};
  EXPECT_EQ(seen, want);  // local rows 3 (global row 6) is padding: skipped
}

TEST(ParamTable, ColumnShardMapsEveryRow) {
  ParamTable t;
  const ParamInfo& p = t.add("w", {2, 4}, InitKind::normal, 0.02f, ShardSpec{1, {{2, 2}}});
  std::vector<int64_t> g;
  p.for_each_element([&](size_t, int64_t gi) { g.push_back(gi); });
  EXPECT_EQ(g, (std::vector<int64_t>{2, 3, 6, 7}));
}

TEST(ParamTable, InitDependsOnlyOnSeedNameAndGlobalIndex) {
  // The same tensor, whole and split into two column shards, gets the same values.
  ParamTable whole, left, right;
  whole.add("w", {3, 4}, InitKind::normal);
  left.add("w", {3, 4}, InitKind::normal, 0.02f, ShardSpec{1, {{0, 2}}});
  right.add("w", {3, 4}, InitKind::normal, 0.02f, ShardSpec{1, {{2, 2}}});
  Arena a(whole.total()), l(left.total()), r(right.total());
  whole.init(a.data(), 7);
  left.init(l.data(), 7);
  right.init(r.data(), 7);
  for (int row = 0; row < 3; ++row)
    for (int c = 0; c < 4; ++c) {
      float want = a.data()[row * 4 + c];
      float got = c < 2 ? l.data()[row * 2 + c] : r.data()[row * 2 + c - 2];
      EXPECT_EQ(want, got);
    }
  Arena b(whole.total());
  whole.init(b.data(), 8);
  EXPECT_NE(a.data()[0], b.data()[0]);  // the seed matters
}

TEST(ParamTable, InitStatisticsFollowNanoGPT) {
  ModelConfig cfg;
  cfg.layers = 2, cfg.dim = 64, cfg.heads = 4, cfg.seq = 16, cfg.vocab = 256;
  GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  model.init(1);
  auto stddev = [&](const std::string& name) {
    const ParamInfo& p = model.table().at(name);
    const float* x = model.params().data() + p.offset;
    double s = 0, s2 = 0;
    for (size_t i = 0; i < p.numel; ++i) s += x[i], s2 += double(x[i]) * x[i];
    double m = s / p.numel;
    return std::sqrt(s2 / p.numel - m * m);
  };
  EXPECT_NEAR(stddev("transformer.wte.weight"), 0.02, 0.002);
  EXPECT_NEAR(stddev("transformer.h.1.mlp.c_fc.weight"), 0.02, 0.002);
  EXPECT_NEAR(stddev("transformer.h.0.mlp.c_proj.weight"), 0.02 / std::sqrt(4.0), 0.001);
  const ParamInfo& ln = model.table().at("transformer.h.0.ln_1.weight");
  EXPECT_EQ(model.params().data()[ln.offset], 1.0f);
  const ParamInfo& bias = model.table().at("transformer.h.0.attn.c_attn.bias");
  EXPECT_EQ(model.params().data()[bias.offset], 0.0f);
  EXPECT_EQ(int64_t(model.table().numel()), cfg.num_params());
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

TEST(ParamTable, MoeParameterCountMatchesTheConfigFormula) {
  ModelConfig cfg;
  cfg.layers = 4, cfg.dim = 32, cfg.heads = 4, cfg.seq = 16, cfg.vocab = 256;
  cfg.experts = 4, cfg.topk = 2, cfg.moe_every = 2;
  GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
  EXPECT_EQ(cfg.moe_layers(), 2);
  EXPECT_EQ(int64_t(model.table().numel()), cfg.num_params());
  ModelConfig dense = cfg;
  dense.experts = 0;
  // Active FLOPs: each of the 2 MoE layers runs two expert MLPs (one more than dense) and
  // its router [E, C].
  const double mlp = 8.0 * 32 * 32 + 5 * 32;
  EXPECT_NEAR(cfg.flops_per_token() - dense.flops_per_token(), 6.0 * 2 * (mlp + 4 * 32), 1e-6);
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

TEST(ParamTable, FindsByNameAndRejectsDuplicates) {
  ParamTable t;
  t.add("a", {3}, InitKind::zeros);
  t.add("b", {5}, InitKind::zeros);
  ASSERT_NE(t.find("b"), nullptr);
  EXPECT_EQ(t.find("b"), &t.entries()[1]);
  EXPECT_EQ(t.at("a").numel, 3u);
  EXPECT_EQ(t.find("c"), nullptr);
  EXPECT_ANY_THROW(t.add("a", {1}, InitKind::zeros));
  // The table stays searchable when copied (GlobalView keeps a copy of the whole table).
  ParamTable copy = t;
  EXPECT_EQ(copy.find("b"), &copy.entries()[1]);
}

// Registering a tensor used to scan the whole table for its name, so building a model of
// many small layers was quadratic (6000 layers, 72k tensors: about 11 s). Counted, not
// timed: every add and every find must go through the name index (at least one hash each:
// a find that scanned the table would hash nothing) and cost it a bounded number of hashes
// and comparisons, at 100 layers as at 4000 (a scan, or a hash that sent these similar
// names to a few buckets, would compare a number of names growing with the table).
struct NameWorkPerOp {
  double add_hashes, add_comparisons, find_hashes, find_comparisons;
};

NameWorkPerOp name_work_of(int layers) {
  static const char* const kSuffixes[] = {
      "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  std::vector<std::string> names;
  for (int l = 0; l < layers; ++l)
    for (const char* s : kSuffixes) names.push_back("transformer.h." + std::to_string(l) + "." + s);
  NameWork work;
  ParamTable t(&work);
  for (const std::string& n : names) t.add(n, {8}, InitKind::zeros);
  const NameWork added = work;
  size_t found = 0;
  for (const std::string& n : names) found += t.find(n) == &t.at(n);
  EXPECT_EQ(found, names.size());
  const double n = double(names.size()), finds = 2 * n;  // at() is a find too
  return {double(added.hashes) / n, double(added.comparisons) / n,
          double(work.hashes - added.hashes) / finds,
          double(work.comparisons - added.comparisons) / finds};
}

TEST(ParamTable, ManyLayersRegisterInLinearWork) {
  for (const int layers : {100, 4000}) {
    const NameWorkPerOp w = name_work_of(layers);
    EXPECT_GE(w.add_hashes, 1.0) << layers << " layers";
    EXPECT_LE(w.add_hashes, 3.0) << layers << " layers";
    EXPECT_LE(w.add_comparisons, 1.0) << layers << " layers";
    EXPECT_EQ(w.find_hashes, 1.0) << layers << " layers";
    EXPECT_LE(w.find_comparisons, 1.5) << layers << " layers";
  }
}

}  // namespace
}  // namespace mt
