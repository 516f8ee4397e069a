#include "comm/local/local_job.h"

#include <thread>

#include "comm/local/group_state.h"
#include "core/core_binding.h"
#include "core/error.h"

namespace mt::local {

namespace {

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

LocalJob::LocalJob(int size, const WorldOptions& opts, int rank_base)
    : size_(size), rank_base_(rank_base), opts_(opts) {
  // The cores this process may use, not the machine's: under `taskset -c 0` two ranks
  // share one core, and a spinning waiter would hold it from the peer it waits for.
  const size_t allowed = allowed_cores().size();
  const unsigned cores =
      allowed > 0 ? unsigned(allowed) : std::max(1u, std::thread::hardware_concurrency());
  policy_ = wait_policy_for(size, int(cores));
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = rank_base + r;
  world_ = std::make_shared<GroupState>(*this, all, group_name("world", all));
  all_groups_.push_back(world_);
}

LocalJob::~LocalJob() = default;

void LocalJob::fail(int rank, std::exception_ptr error, FailKind kind) {
  const bool provisional = kind == FailKind::provisional;
  {
    std::lock_guard lock(mu_);
    if (failed_.load()) {
      if (provisional_ && kind == FailKind::rank_exit && rank == failed_rank_) {
        failure_message_ = what_of(error);
        failure_ = error;
        provisional_ = false;
      }
      return;
    }
    provisional_ = provisional;
    failed_rank_ = rank;
    failure_message_ = what_of(error);
    failure_ = error;
    failed_.store(true, std::memory_order_release);
  }
  std::vector<std::shared_ptr<GroupState>> groups;
  {
    std::lock_guard lock(mu_);
    for (auto& w : all_groups_)
      if (auto g = w.lock()) groups.push_back(std::move(g));
  }
  for (auto& g : groups) g->bell.ring();
}

int LocalJob::failed_rank() const {
  std::lock_guard lock(mu_);
  return failed_rank_;
}

std::string LocalJob::failure_message() const {
  std::lock_guard lock(mu_);
  return failure_message_;
}

std::exception_ptr LocalJob::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

std::shared_ptr<GroupState> LocalJob::join_group(int rank, uint64_t call_index,
                                                 const std::vector<int>& members,
                                                 const std::string& kind) {
  MT_CHECK(!members.empty(), "rank ", rank, ": make_group(", kind, ") with no members");
  bool has_me = false;
  for (size_t i = 0; i < members.size(); ++i) {
    MT_CHECK(members[i] >= rank_base_ && members[i] < rank_base_ + size_, "rank ", rank,
             ": make_group(", kind, "): member ", members[i], " outside ranks ", rank_base_, "..",
             rank_base_ + size_ - 1, " of this process");
    MT_CHECK(i == 0 || members[i] > members[i - 1], "rank ", rank, ": make_group(", kind,
             "): members must be ascending and distinct");
    has_me |= members[i] == rank;
  }
  MT_CHECK(has_me, "rank ", rank, ": make_group(", kind, "): rank is not in ",
           group_name(kind, members));

  std::lock_guard lock(mu_);
  auto key = std::make_pair(call_index, members.front());
  auto it = pending_groups_.find(key);
  if (it == pending_groups_.end()) {
    auto g = std::make_shared<GroupState>(*this, members, group_name(kind, members));
    all_groups_.push_back(g);
    it = pending_groups_.emplace(key, Pending{g, 0}).first;
  }
  std::shared_ptr<GroupState> g = it->second.group;
  MT_CHECK(g->members == members && g->name == group_name(kind, members), "rank ", rank,
           ": make_group call #", call_index, " asked for ", group_name(kind, members),
           " but another member asked for ", g->name);
  if (++it->second.joined == static_cast<int>(members.size())) pending_groups_.erase(it);
  return g;
}

GroupState::GroupState(LocalJob& j, std::vector<int> m, std::string n)
    : job(j),
      members(std::move(m)),
      name(std::move(n)),
      arrived(new PhaseCounter[members.size()]),
      desc(members.size()),
      lines(new ProgressLine[members.size()]) {}

const char* op_name(OpCode op) {
  switch (op) {
    case OpCode::barrier:
      return "barrier";
    case OpCode::all_reduce:
      return "all_reduce";
    case OpCode::reduce_scatter:
      return "reduce_scatter";
    case OpCode::all_gather:
      return "all_gather";
    case OpCode::broadcast:
      return "broadcast";
    case OpCode::all_to_all_v:
      return "all_to_all_v";
  }
  return "?";
}

}  // namespace mt::local
