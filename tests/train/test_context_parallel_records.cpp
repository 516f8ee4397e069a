// The cp fields of a step record (docs/context_parallel.md, "Metrics"): present with
// context parallelism, absent without it (a cp-less record is the one it always was).
#include <gtest/gtest.h>

#include "train/moe_metrics.h"
#include "train/records.h"

namespace mt {
namespace {

TEST(ContextParallelRecords, CpTrafficIsInTheStepRecordOnlyWithCp) {
  const MoeMetrics dense(ModelConfig{}, {}, nullptr, nullptr);
  StepRecord r;
  r.step = 3;
  EXPECT_FALSE(to_json(r, dense).contains("cp_comm_bytes"));
  r.cp = GroupComm{4096, 12, 0.25};
  const nlohmann::json j = to_json(r, dense);
  EXPECT_EQ(j.at("cp_comm_bytes"), 4096);
  EXPECT_EQ(j.at("cp_comm_calls"), 12);
  EXPECT_DOUBLE_EQ(j.at("cp_comm_wait_s").get<double>(), 0.25);
}

}  // namespace
}  // namespace mt
