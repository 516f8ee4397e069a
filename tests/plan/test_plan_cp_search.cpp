// Issue #30 item 6: context parallelism searched under this engine's own GPU software (the
// presets' default) within the search's work budget: cp only where a sequence's activations
// outweigh a layer's weights, and under a searched cp only micro-batches below it
// (plan/search.cpp, cp_choices and cp_micro_batches).
#include <gtest/gtest.h>

#include <algorithm>

#include "plan/search.h"
#include "plan/software_profiles.h"

namespace mt::plan {
namespace {

PlanRequest gpt(int layers, int dim, int heads, int seq, int batch, int gpus) {
  PlanRequest r;
  r.model.layers = layers, r.model.dim = dim, r.model.heads = heads, r.model.seq = seq;
  r.model.vocab = 51200;
  r.batch = batch;
  r.hardware = preset_profile("a100-80gb");  // software meshtrain, the default
  r.devices = gpus;
  return r;
}

bool any_cp(const std::vector<Layout>& ls) {
  return std::any_of(ls.begin(), ls.end(), [](const Layout& l) { return l.cp > 1; });
}

// docs/planner.md's example, every knob open (labelled full: about 6 s of CPU; plan.golden
// runs the same search in the default suite): with cp searched wherever the software has it,
// it needed more than the whole budget (1e10 units, refused); now it keeps well inside.
TEST(PlanCpSearch, Gpt175bExampleStaysWithinTheWorkBudget) {
  const PlanRequest r = gpt(96, 12288, 96, 2048, 1536, 1024);
  ASSERT_GT(r.hardware.max_cp, 1) << "the default software offers cp";
  const SearchResult s = search_layouts(r, 12);
  EXPECT_EQ(s.candidates.size(), 12u);
  EXPECT_LT(s.work, 0.5 * kSearchWorkLimit) << s.considered << " combinations";
}

// cp is searched past the sequence length where one sequence's activations outweigh a
// layer's weights (near 0.7 h for a dense GPT without flash attention: about 8.6K for
// h 12288 counting 34 s h alone, lower with the attention scores), and not below it.
TEST(PlanCpSearch, CpIsSearchedWhereActivationsDominateALayer) {
  EXPECT_FALSE(any_cp(enumerate_layouts(gpt(8, 12288, 96, 2048, 64, 64))));
  EXPECT_TRUE(any_cp(enumerate_layouts(gpt(8, 12288, 96, 16384, 64, 64))));
  // A small model's layer is light: cp pays from short sequences on.
  EXPECT_TRUE(any_cp(enumerate_layouts(gpt(8, 1024, 16, 2048, 64, 64))));
  // A fixed --cp is planned whatever the sequence.
  PlanRequest fixed = gpt(8, 12288, 96, 2048, 64, 64);
  fixed.cp = 2;
  const auto ls = enumerate_layouts(fixed);
  ASSERT_FALSE(ls.empty());
  EXPECT_TRUE(std::all_of(ls.begin(), ls.end(), [](const Layout& l) { return l.cp == 2; }));
}

// A searched cp holds under one sequence per rank and microbatch (b < cp); b a multiple of
// cp is the cp-1 layout of dp x cp replicas with micro-batch b / cp, without the ring. With
// cp fixed by the user, every micro-batch stays open.
TEST(PlanCpSearch, SearchedCpKeepsMicroBatchesBelowIt) {
  const auto open = enumerate_layouts(gpt(8, 1024, 16, 2048, 64, 64));
  ASSERT_TRUE(any_cp(open));
  for (const Layout& l : open) {
    if (l.cp > 1) {
      EXPECT_LT(l.micro_batch, l.cp) << "cp " << l.cp << " mb " << l.micro_batch;
    }
  }
  PlanRequest fixed = gpt(8, 1024, 16, 2048, 64, 64);
  fixed.cp = 2;
  const auto ls = enumerate_layouts(fixed);
  EXPECT_TRUE(std::any_of(ls.begin(), ls.end(), [](const Layout& l) { return l.micro_batch > 1; }));
}

}  // namespace
}  // namespace mt::plan
