#include "train/validate_context_parallel.h"

#include "core/error.h"

namespace mt {

std::string world_flags_text(const ParallelOptions& p) {
  return p.cp > 1 ? "--pp x --dp x --cp x --tp" : "--pp x --dp x --tp";
}

namespace {

// Compositions not built yet: each names the flag and why, so no setting is ignored.
void refuse_unbuilt(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  const std::string cp = str("--cp ", p.cp);
  MT_REQUIRE(o.model.experts == 0 && p.ep == 1, cp,
             " with --experts / --ep is not built yet (routing statistics and the aux loss "
             "are not reduced over cp)");
  MT_REQUIRE(o.engine.ranks_per_process == 1, cp, " with --ranks-per-process ",
             o.engine.ranks_per_process, " (the hybrid world) is not built yet");
  MT_REQUIRE(p.dp_sync.kind == DpSync::Kind::every_step, cp, " with --dp-sync ",
             dp_sync_text(p.dp_sync),
             " is not built yet (replicas would step on partial-sequence gradients)");
  MT_REQUIRE(!p.auto_layout, cp,
             " with --auto-layout is not built yet (the planner does not search cp)");
}

}  // namespace

void validate_context_parallel(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  MT_REQUIRE(p.cp >= 1, "--cp must be >= 1 (got ", p.cp, ")");
  if (p.cp == 1) {
    MT_REQUIRE(p.cp_comm == ParallelOptions{}.cp_comm,
               "--cp-comm has no effect without --cp > 1: give --cp N or drop --cp-comm");
    return;
  }
  // Zigzag: 2cp equal chunks, rank r holds chunks r and 2cp-1-r.
  const int64_t chunks = 2 * int64_t(p.cp);
  MT_REQUIRE(o.model.seq % chunks == 0, "--seq ", o.model.seq,
             " must be divisible by 2 x --cp = ", chunks,
             " (each sequence is cut into 2cp equal chunks, rank r holding chunks r "
             "and 2cp-1-r)");
  refuse_unbuilt(o);
}

}  // namespace mt
