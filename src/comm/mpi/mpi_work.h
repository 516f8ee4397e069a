// The Work handle of one MPI call: the nonblocking requests it started, what to do once
// they complete (divide for avg, move an in-place reduce-scatter result), and the storage
// MPI reads until then (all-to-all-v counts).
//
// wait() polls MPI_Test rather than calling MPI_Wait so it can enforce the group's
// timeout. Open MPI progresses nonblocking collectives only inside MPI calls, so the poll
// spins at first (as MPI_Wait would), then yields, then sleeps with a growing backoff once
// the wait is clearly long. A wait past the timeout prints one line and aborts the job:
// MPI cannot cancel a started collective, so there is no state worth unwinding to.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/mpi_group.h"

namespace mt {

class MpiWork : public Work::Impl {
 public:
  // what names the call for messages, e.g. "all_reduce #12 (1000 x f32)".
  MpiWork(std::shared_ptr<MpiGroup> group, std::string what);
  ~MpiWork() override;

  // Set up before the work is handed out.
  std::vector<MPI_Request> requests;
  std::vector<int> scratch;           // arrays MPI reads until completion
  std::function<void()> on_complete;  // runs once, on the thread that sees completion
  std::shared_ptr<MpiWork> previous;  // must complete first (issue order)

  bool test() override;
  void wait() override { wait_after(0); }
  void wait_after(double waited_s) override;

 private:
  bool poll_locked();  // one MPI_Testall of this work's requests; true once all are done
  [[noreturn]] void fail_timeout(double waited_s);

  std::shared_ptr<MpiGroup> group_;
  std::string what_;
  std::mutex mutex_;  // MPI forbids testing one request from two threads at once
  bool done_ = false;
  std::exception_ptr error_;
};

// Blocks on one request with the group's timeout (used for internal control traffic).
void mpi_wait_with_timeout(const std::shared_ptr<MpiGroup>& group, MPI_Request* req,
                           const std::string& what);

}  // namespace mt
