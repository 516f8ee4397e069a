// The engine's --cp planned locally (docs/planner.md, "Closed loop"): a local cp layout is
// one train accepts, carries cp and cp-comm into the run's options, and pays its K/V
// exchange; GPU software keeps its own cp rules (train's see cp 1 there).
#include <gtest/gtest.h>

#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

PlanRequest llama_request() {
  PlanRequest r = testing::small_request(2);
  r.model.arch = Arch::llama;
  r.model.kv_heads = 2;
  return r;
}

TEST(PlanLocalCp, TheEnginesCpIsPlannedWithItsExchange) {
  PlanRequest r = llama_request();
  // Slow sends, so that the ring's steps outlast the attention they hide under.
  r.hardware.p2p_bw_intra = r.hardware.p2p_bw_inter = 1e6;
  for (CpComm comm : {CpComm::ring, CpComm::allgather}) {
    Layout l;
    l.cp = 2, l.cp_comm = comm, l.micro_batch = 8;
    EXPECT_NO_THROW(validate_candidate(r, l));
    const TrainOptions o = train_options(r, l);
    EXPECT_EQ(o.parallel.cp, 2);
    EXPECT_EQ(o.parallel.cp_comm, comm);
    EXPECT_GT(stage_costs(r, l)[0].cp_comm, 0);
  }
  // GPU software's cp is its own: train's engine rules do not apply.
  PlanRequest gpu = llama_request();
  gpu.hardware = preset_profile("h100-80gb");
  apply_software(gpu.hardware, "llama3-2024");
  Layout l;
  l.cp = 2, l.micro_batch = 8;
  EXPECT_EQ(train_options(gpu, l).parallel.cp, 1);
}

}  // namespace
}  // namespace mt::plan
