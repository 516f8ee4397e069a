// State shared by all ranks of one run_local job: options, the first failure, and the
// registry through which make_group hands every member of a group the same GroupState.
#pragma once

#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/local/doorbell.h"
#include "comm/world.h"

namespace mt::local {

struct GroupState;

class LocalJob {
 public:
  // rank_base: the world rank of this job's first thread. 0 for run_local; a hybrid world's
  // process p runs world ranks p*K .. p*K+K-1, so that messages and group names use the
  // ranks the user knows.
  LocalJob(int size, const WorldOptions& opts, int rank_base = 0);
  ~LocalJob();

  int size() const { return size_; }
  int rank_base() const { return rank_base_; }
  const WorldOptions& options() const { return opts_; }
  const WaitPolicy& wait_policy() const { return policy_; }
  const std::shared_ptr<GroupState>& world_group() const { return world_; }
  // The cores a progress thread may use when rank threads are bound (empty: it inherits
  // its rank's placement). Set before any rank starts.
  void set_progress_cores(std::vector<int> cores) { progress_cores_ = std::move(cores); }
  const std::vector<int>& progress_cores() const { return progress_cores_; }

  // Records rank's failure if it is the first one, then wakes every waiter of every group
  // so pending waits fail promptly. Later failures (usually consequences) are ignored.
  // A provisional failure (a rank unwinding an exception while a call is pending, before
  // run_local catches the exception itself) is replaced by the exception that rank's
  // main function ends with (kind rank_exit), not by the errors it causes meanwhile.
  enum class FailKind { ordinary, provisional, rank_exit };
  void fail(int rank, std::exception_ptr error, FailKind kind = FailKind::ordinary);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Valid once failed(): the root-cause rank, its message and exception.
  int failed_rank() const;
  std::string failure_message() const;
  std::exception_ptr failure() const;

  // The call_index-th make_group of rank `rank`, with its group's members: the first
  // member to arrive creates the state, the others find it.
  std::shared_ptr<GroupState> join_group(int rank, uint64_t call_index,
                                         const std::vector<int>& members, const std::string& kind);

 private:
  int size_;
  int rank_base_;
  WorldOptions opts_;
  WaitPolicy policy_;
  std::vector<int> progress_cores_;
  std::shared_ptr<GroupState> world_;

  mutable std::mutex mu_;
  std::atomic<bool> failed_{false};
  int failed_rank_ = -1;
  bool provisional_ = false;
  std::string failure_message_;
  std::exception_ptr failure_;

  struct Pending {
    std::shared_ptr<GroupState> group;
    int joined = 0;
  };
  std::map<std::pair<uint64_t, int>, Pending> pending_groups_;  // (call, first member)
  std::vector<std::weak_ptr<GroupState>> all_groups_;           // to wake them on failure
};

}  // namespace mt::local
