#include "comm/mpi/mpi_work.h"
#include "comm/mpi/mpi_abort.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "comm/mpi/mpi_check.h"
#include "core/timer.h"

namespace mt {

namespace {

// Poll pacing: MPI only progresses inside MPI calls, so the first 10 ms spin like MPI_Wait
// (yielding after 1 ms let a loaded machine take the core for whole time slices and made
// 1 MiB all-reduces several times slower); up to 200 ms we yield between polls
// (oversubscribed runs); beyond that the wait is long and sleeping costs nothing.
class Backoff {
 public:
  void pause(double waited_s) {
    if (waited_s < 0.01) return;
    if (waited_s < 0.2) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (sleep_us_ < 1000) sleep_us_ *= 2;
  }

 private:
  int sleep_us_ = 50;
};

[[noreturn]] void abort_job(const std::string& line) {
  mpi_abort_once(line, 1);
}

}  // namespace

MpiWork::MpiWork(std::shared_ptr<MpiGroup> group, std::string what)
    : group_(std::move(group)), what_(std::move(what)) {}

MpiWork::~MpiWork() {
  // Dropping a pending Work would let MPI write into a buffer the caller may free, so wait
  // here, unless we are unwinding from an error: then the job is about to be aborted and
  // waiting could only delay that.
  if (done_ || std::uncaught_exceptions() > 0) return;
  try {
    wait();
  } catch (const std::exception& e) {
    abort_job(str("rank ", group_->world_rank, ": ", e.what()));
  }
}

bool MpiWork::poll_locked() {
  if (done_) return true;
  int flag = 0;
  MT_MPI_CHECK(
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE),
      what_, " on group ", group_->name);
  if (!flag) return false;
  if (on_complete) on_complete();
  done_ = true;
  previous.reset();
  return true;
}

bool MpiWork::test() {
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread is waiting on it right now
  if (error_) std::rethrow_exception(error_);
  if (done_) return true;
  // Locks are only ever taken from newer to older work, so this cannot deadlock.
  if (previous && !previous->test()) return false;
  try {
    return poll_locked();
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
}

void MpiWork::wait_after(double waited_s) {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  if (done_) return;
  if (previous) previous->wait();  // issue order; it enforces its own timeout
  Stopwatch watch;
  Backoff backoff;
  try {
    while (!poll_locked()) {
      double waited = waited_s + watch.elapsed();
      if (waited > group_->opts.timeout_s) fail_timeout(waited);
      backoff.pause(waited);
    }
  } catch (...) {
    error_ = std::current_exception();
    throw;
  }
  group_->wait_ns += static_cast<uint64_t>(watch.elapsed() * 1e9);
}

void MpiWork::fail_timeout(double waited_s) {
  abort_job(str("rank ", group_->world_rank, ": ", what_, " on group ", group_->name,
                ": no completion within ", group_->opts.timeout_s, " s (waited ", waited_s,
                " s; which ranks did not arrive is unknown under MPI; "
                "MESHTRAIN_CHECK_COLLECTIVES=1 reports mismatched calls)"));
}

void mpi_wait_with_timeout(const std::shared_ptr<MpiGroup>& group, MPI_Request* req,
                           const std::string& what) {
  MpiWork work(group, what);
  work.requests.push_back(*req);
  *req = MPI_REQUEST_NULL;
  work.wait();
}

}  // namespace mt
