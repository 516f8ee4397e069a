#include "comm/local/collective_op.h"

#include <string>

#include "comm/local/local_communicator.h"
#include "comm/local/local_job.h"
#include "core/error.h"

namespace mt::local {

uint64_t CollectiveOp::target() const {
  switch (stage_.load()) {
    case published:
      return seq_ * kPhasesPerOp + 1;
    case shared:
      return seq_ * kPhasesPerOp + 3;
    default:
      return 0;
  }
}

bool CollectiveOp::all_at(uint64_t t) const {
  const PhaseCounter* counters = comm_.group_->arrived.get();
  for (int i = 0; i < comm_.size(); ++i)
    if (counters[i].value.load() < t) return false;
  return true;
}

void CollectiveOp::throw_if_job_failed() const {
  LocalJob& job = comm_.job_;
  if (job.failed())
    throw RuntimeError(str(comm_.where(op_name(d_.op), seq_), ": stopped because rank ",
                           job.failed_rank(), " failed: ", job.failure_message()));
}

// A timeout or mismatch is this rank's failure: stop the others now rather than letting
// each of them time out in turn.
void CollectiveOp::fail(std::exception_ptr error) {
  status_->error = error;
  stage_.store(finished);
  comm_.job_.fail(comm_.global_rank_, error);
}

bool CollectiveOp::advance() {
  try {
    for (;;) {
      switch (stage_.load()) {
        case unpublished:
          throw_if_job_failed();
          comm_.publish(d_, seq_);
          stage_.store(published);
          break;
        case published:
          if (!all_at(target())) {
            throw_if_job_failed();
            return false;
          }
          comm_.verify_agreement(d_, seq_);
          if (d_.op == OpCode::barrier) {
            stage_.store(finished);
            return true;
          }
          comm_.run_share(d_, seq_);
          comm_.arrive(seq_, 3);
          stage_.store(shared);
          break;
        case shared:
          if (!all_at(target())) {
            throw_if_job_failed();
            return false;
          }
          stage_.store(finished);
          return true;
        default:
          return true;
      }
    }
  } catch (...) {
    fail(std::current_exception());
    return true;
  }
}

bool CollectiveOp::ready() const {
  const int s = stage_.load();
  if (s == unpublished || s == finished) return true;
  return comm_.job_.failed() || all_at(target());
}

void CollectiveOp::request_laggards() const {
  const uint64_t t = target();
  const PhaseCounter* counters = comm_.group_->arrived.get();
  for (int i = 0; i < comm_.size(); ++i)
    if (i != comm_.me_ && counters[i].value.load() < t) comm_.group_->lines[i].request();
}

void CollectiveOp::time_out(double timeout_s) {
  const uint64_t t = target();
  if (t == 0) return;
  const PhaseCounter* counters = comm_.group_->arrived.get();
  std::string late;
  int nlate = 0;
  for (int i = 0; i < comm_.size(); ++i) {
    if (counters[i].value.load() >= t) continue;
    late += (nlate++ ? ", " : "") + std::to_string(comm_.group_->members[i]);
  }
  if (nlate == 0) return;  // arrived just now
  fail(std::make_exception_ptr(
      RuntimeError(str(comm_.where(op_name(d_.op), seq_), ": ", nlate > 1 ? "ranks " : "rank ",
                       late, " did not arrive within ", timeout_s, " s"))));
}

}  // namespace mt::local
