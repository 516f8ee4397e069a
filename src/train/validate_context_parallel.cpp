#include "train/validate_context_parallel.h"

#include "core/error.h"

namespace mt {

std::string world_flags_text(const ParallelOptions& p) {
  return p.cp > 1 ? "--pp x --dp x --cp x --tp" : "--pp x --dp x --tp";
}

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
}

}  // namespace mt
