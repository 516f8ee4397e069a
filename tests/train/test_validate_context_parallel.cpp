// The rules of --cp (train/validate_context_parallel.h): a llama layout with cp composed
// with dp (ZeRO 0-3), tp (+sp), recomputation and bf16 passes; a sequence that is not 2cp
// chunks and every composition not built yet is one UsageError naming it; experts, the hybrid
// world and --dp-sync compose.
#include "train/validate_options.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util/usage_error.h"

namespace mt {
namespace {

std::string usage_error(const TrainOptions& o) {
  return test_util::usage_error_of([&] { validate_train_options(o); });
}

TrainOptions llama_cp(int cp) {
  TrainOptions o;
  o.model.arch = Arch::llama;
  o.model.heads = 4;
  o.model.kv_heads = 2;
  o.model.seq = 64;
  o.parallel.cp = cp;
  return o;
}

TEST(ValidateContextParallel, ComposesWithDpTpSpAndRecomputation) {
  for (int cp : {1, 2, 4, 8}) EXPECT_EQ(usage_error(llama_cp(cp)), "") << cp;
  TrainOptions o = llama_cp(2);
  o.parallel.cp_comm = CpComm::allgather;
  o.parallel.dp = 2;
  o.parallel.zero = 3;
  o.parallel.tp = 2;
  o.parallel.sequence_parallel = true;
  o.optim.recompute = Recompute::full;
  EXPECT_EQ(usage_error(o), "");
  EXPECT_EQ(o.parallel.world(), 8);
}

TEST(ValidateContextParallel, TheGpt2BlockIsAccepted) {
  TrainOptions o = llama_cp(2);
  o.model.arch = Arch::gpt2;
  o.model.kv_heads = 0;
  EXPECT_EQ(usage_error(o), "");
}

TEST(ValidateContextParallel, EachRefusalNamesWhatIsMissing) {
  struct Case {
    std::function<void(TrainOptions&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](TrainOptions& o) { o.parallel.cp = 0; }, "--cp must be >= 1"},
      {[](TrainOptions& o) { o.model.seq = 62; }, "--seq 62 must be divisible by 2 x --cp = 4"},
      {[](TrainOptions& o) {  // 2 sequences of 64 / 2 rows = 64 rows, not divisible by 3
         o.optim.batch = 2;
         o.model.experts = 4;
         o.model.dim = 96;
         o.model.heads = 6;
         o.model.kv_heads = 3;
         o.parallel.tp = 3;
       },
       "splits each microbatch's 64 token rows (batch / (dp x microbatches) x seq / cp)"},
  };
  for (const Case& c : cases) {
    TrainOptions o = llama_cp(2);
    c.edit(o);
    const std::string e = usage_error(o);
    EXPECT_NE(e.find(c.message), std::string::npos) << "got: " << e << "\nwant: " << c.message;
  }
  TrainOptions one = llama_cp(1);
  one.parallel.cp_comm = CpComm::allgather;
  EXPECT_NE(usage_error(one).find("--cp-comm has no effect without --cp > 1"), std::string::npos);
}

// Experts, expert parallelism, the hybrid world and --dp-sync compose with cp (issue #29
// item 4; their equivalence tests are equivalence.cp_moe_*, cp_hybrid*, cp_dp_sync*).
TEST(ValidateContextParallel, ComposesWithExpertsHybridWorldAndDpSync) {
  TrainOptions moe = llama_cp(2);
  moe.model.experts = 4;
  moe.model.capacity_factor = 1.25f;
  moe.parallel.dp = 2;
  moe.parallel.ep = 2;
  EXPECT_EQ(usage_error(moe), "");
  TrainOptions hybrid = llama_cp(4);
  hybrid.engine.backend = Backend::mpi;
  hybrid.engine.ranks_per_process = 2;
  EXPECT_EQ(usage_error(hybrid), "");
  for (const char* sync : {"local:2", "diloco:4"}) {
    TrainOptions o = llama_cp(2);
    o.parallel.dp = 2;
    o.parallel.dp_sync = dp_sync_from_flag(sync);
    EXPECT_EQ(usage_error(o), "") << sync;
  }
}

TEST(ValidateContextParallel, SequenceParallelCountsTheRowsOfTheShard) {
  TrainOptions o = llama_cp(4);  // 64 / 4 = 16 rows per sequence, batch 8: 128 rows
  o.optim.batch = 1;
  o.parallel.tp = 2;
  o.parallel.sequence_parallel = true;
  EXPECT_EQ(usage_error(o), "");
  o.model.seq = 8;  // 8 / 4 = 2 rows: still even
  EXPECT_EQ(usage_error(o), "");
  o.parallel.tp = 4;
  o.model.kv_heads = 4;
  EXPECT_NE(usage_error(o).find("/ cp) divisible by --tp 4"), std::string::npos) << usage_error(o);
}

}  // namespace
}  // namespace mt
