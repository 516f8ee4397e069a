#include "comm/hybrid/hybrid_process.h"
#include "comm/mpi/mpi_abort.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <new>
#include <thread>

#include "comm/hybrid/hierarchical_communicator.h"
#include "comm/hybrid/placement.h"
#include "comm/local/local_communicator.h"
#include "comm/mpi/mpi_communicator.h"
#include "core/error.h"
#include "core/timer.h"

namespace mt::hybrid {

namespace {

// The rank's own view of a communicator another thread of this process split: same MPI
// communicator, its own counters and its own rank in messages.
std::shared_ptr<MpiGroup> view_for(const MpiGroup& g, int world_rank) {
  auto v = std::make_shared<MpiGroup>();
  v->comm = g.comm;
  v->check_comm = g.check_comm;
  v->name = g.name;
  v->members = g.members;
  v->rank = g.rank;
  v->world_rank = world_rank;
  v->tag_ub = g.tag_ub;
  v->opts = g.opts;
  return v;
}

// The failure as one line: it names the rank unless it already does.
std::string root_cause_line(const local::LocalJob& job, int* code) {
  const std::string prefix = str("rank ", job.failed_rank(), ": ");
  *code = 1;
  try {
    std::rethrow_exception(job.failure());
  } catch (const UsageError& e) {
    *code = 2;
    return prefix + e.what();
  } catch (const std::bad_alloc&) {
    return prefix + "out of memory (std::bad_alloc)";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return what.rfind("rank ", 0) == 0 ? what : prefix + what;
  } catch (...) {
    return prefix + "unknown exception";
  }
}

}  // namespace

HybridProcess::HybridProcess(int ranks_per_process, const WorldOptions& opts)
    : k_(ranks_per_process), opts_(opts) {
  MT_CHECK(k_ >= 1 && k_ <= kMaxLocalRanks, "--ranks-per-process ", k_);
  mpi_ = std::make_unique<MpiWorld>(opts);
  job_ = std::make_unique<local::LocalJob>(k_, opts, first_rank());
  requests_.resize(static_cast<size_t>(k_));
  splits_.resize(static_cast<size_t>(k_));
  exited_.reset(new std::atomic<bool>[static_cast<size_t>(k_)]);
  for (int s = 0; s < k_; ++s) exited_[s].store(false);
}

HybridProcess::~HybridProcess() {
  splits_.clear();
  job_.reset();
  mpi_.reset();
}

void HybridProcess::split_all() {
  for (int s = 0; s < k_; ++s) {
    const Request& r = requests_[static_cast<size_t>(s)];
    const int me = first_rank() + s;
    const GroupSpan span = group_span(r.members, k_);
    const std::string name = group_name(r.kind, r.members);
    int color = -1, key = process(), p2p_color = -1;
    std::vector<int> across;
    std::string across_name = name;
    if (span.crosses_processes()) {
      if (span.uneven())
        throw RuntimeError(str("rank ", me, ": group ", name,
                               " has different numbers of members in different processes (", k_,
                               " ranks per process); the hybrid world needs the same number in "
                               "each: choose --ranks-per-process to match the layout"));
      const int L = span.per_process;
      int index = 0;
      while (r.members[static_cast<size_t>(index)] != me) ++index;
      const int j = index % L;
      // (group, slot) -> color: a group is known by its lowest member, j < L <= K.
      color = r.members.front() * k_ + j;
      for (size_t g = static_cast<size_t>(j); g < r.members.size(); g += static_cast<size_t>(L))
        across.push_back(r.members[g]);
      if (L > 1) {
        across_name = group_name(name + "/across", across);
        p2p_color = color;  // one member per process needs no second communicator
      }
    }
    Split& out = splits_[static_cast<size_t>(s)];
    out.coll = mpi_->split(color, key, across, across_name, me);
    out.p2p = mpi_->split(p2p_color, key, across, across_name + "/p2p", me);
  }
}

std::shared_ptr<Communicator> HybridProcess::make_group(int world_rank, uint64_t call,
                                                        const std::vector<int>& members,
                                                        const std::string& kind,
                                                        Communicator& rendezvous) {
  const std::string name = group_name(kind, members);
  bool ok = !members.empty(), mine = false;
  for (size_t i = 0; i < members.size(); ++i) {
    ok &= members[i] >= 0 && members[i] < world_size() && (i == 0 || members[i] > members[i - 1]);
    mine |= members[i] == world_rank;
  }
  MT_CHECK(ok && mine, "rank ", world_rank, ": make_group ", name,
           ": members must be ascending world ranks including this rank");
  const int slot = world_rank - first_rank();
  requests_[static_cast<size_t>(slot)] = {members, kind};
  rendezvous.barrier().wait();
  if (slot == 0) split_all();
  rendezvous.barrier().wait();

  const GroupSpan span = group_span(members, k_);
  const Split& split = splits_[static_cast<size_t>(slot)];
  if (!span.crosses_processes())
    return std::make_shared<local::LocalCommunicator>(
        job_->join_group(world_rank, call, members, kind), world_rank);
  if (span.per_process == 1)
    return std::make_shared<MpiCommunicator>(view_for(*split.coll, world_rank));

  const int L = span.per_process;
  int index = 0;
  while (members[static_cast<size_t>(index)] != world_rank) ++index;
  HierarchicalParts parts;
  parts.members = members;
  parts.name = name;
  parts.processes = static_cast<int>(span.processes.size());
  parts.per_process = L;
  parts.process_index = index / L;
  parts.local_index = index % L;
  parts.timeout_s = opts_.timeout_s;
  const size_t here = static_cast<size_t>(parts.process_index * L);
  const std::vector<int> inside(members.begin() + here, members.begin() + here + L);
  parts.intra = std::make_shared<local::LocalCommunicator>(
      job_->join_group(world_rank, call, inside, name + "/within"), world_rank);
  parts.inter = std::make_shared<MpiCommunicator>(view_for(*split.coll, world_rank));
  // Slot k's point-to-point communicator was split by thread 0 for the thread of rank
  // inside[k]; every member here sends on it to reach slot k elsewhere.
  for (int k = 0; k < L; ++k) {
    const Split& theirs =
        splits_[static_cast<size_t>(inside[static_cast<size_t>(k)] - first_rank())];
    parts.p2p.push_back(std::make_shared<MpiCommunicator>(view_for(*theirs.p2p, world_rank)));
  }
  return std::make_shared<HierarchicalCommunicator>(std::move(parts));
}

void HybridProcess::die(int world_rank) {
  // A consequence (a peer of this process woken by the failure) lets the root cause's own
  // thread report, so that its final message, not a provisional one, is printed.
  const int root = job_->failed_rank();
  if (root != world_rank && root >= first_rank() && root < first_rank() + k_) {
    Stopwatch watch;
    while (!exited_[root - first_rank()].load() && watch.elapsed() < 10)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard lock(die_mu_);  // the root cause is read once its thread has reported
  int code = 1;
  const std::string line = root_cause_line(*job_, &code);
  mpi_abort_once(line, code);
}

HybridWorld::HybridWorld(HybridProcess& process, int world_rank)
    : process_(process), rank_(world_rank) {
  rendezvous_ = std::make_shared<local::LocalCommunicator>(process_.job().world_group(), rank_);
  std::vector<int> all(static_cast<size_t>(process_.world_size()));
  for (size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
  world_ = make_group(all, "world");
}

std::shared_ptr<Communicator> HybridWorld::make_group(const std::vector<int>& members,
                                                      const std::string& kind) {
  return process_.make_group(rank_, calls_++, members, kind, *rendezvous_);
}

void HybridWorld::abort(const std::string& why) {
  mpi_abort_once(str("rank ", rank_, ": ", why), 1);
}

}  // namespace mt::hybrid
