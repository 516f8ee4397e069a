#include "comm/mpi/mpi_world.h"
#include "comm/mpi/mpi_abort.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/mpi/mpi_work.h"
#include "core/launcher.h"
#include "core/timer.h"

namespace mt {

int launcher_local_rank() {
  return launcher_from_env().local_rank;
}

MpiWorld::MpiWorld(const WorldOptions& opts) : opts_(opts) {
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "world rank");
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_), "world size");

  // make_p2p_tag's largest tag must be a legal MPI tag here (the standard only promises
  // 32767; Open MPI gives 2^31-1).
  int* tag_ub = nullptr;
  int found = 0;
  MT_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "MPI_TAG_UB");
  const int largest_tag = make_p2p_tag(P2PKind::user, 255, 65535);
  if (!found || *tag_ub < largest_tag)
    throw RuntimeError(str("this MPI's MPI_TAG_UB (", found ? *tag_ub : 0,
                           ") is below the largest point-to-point tag meshtrain uses (",
                           largest_tag, ")"));
  tag_ub_ = *tag_ub;

  MPI_Comm node = MPI_COMM_NULL;
  MT_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
      "node split");
  own(node);
  MT_MPI_CHECK(MPI_Comm_size(node, &local_size_), "node size");
  local_rank_ = launcher_local_rank();
  if (local_rank_ < 0) MT_MPI_CHECK(MPI_Comm_rank(node, &local_rank_), "node rank");

  std::vector<int> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[static_cast<size_t>(r)] = r;
  MPI_Comm control = MPI_COMM_NULL, world = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &control), "control communicator");
  control_ = new_group(own(control), all, "control" + group_name("", all));
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world), "world communicator");
  progress_ = std::make_unique<BackgroundProgress>();
  auto world_group = new_group(own(world), all, group_name("world", all));
  world_group->progress = progress_.get();
  world_ = std::make_shared<MpiCommunicator>(std::move(world_group));
}

MpiWorld::~MpiWorld() {
  progress_.reset();  // no MPI call from its thread once the communicators go
  world_.reset();
  control_.reset();
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) MPI_Comm_free(&*it);
}

MPI_Comm MpiWorld::own(MPI_Comm comm) {
  owned_.push_back(comm);
  MT_MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "error handler");
  return comm;
}

std::shared_ptr<MpiGroup> MpiWorld::new_group(MPI_Comm comm, const std::vector<int>& members,
                                              const std::string& name) {
  auto g = std::make_shared<MpiGroup>();
  g->comm = comm;
  g->members = members;
  g->name = name;
  g->world_rank = rank_;
  g->tag_ub = tag_ub_;
  g->opts = opts_;
  MT_MPI_CHECK(MPI_Comm_rank(comm, &g->rank), "group rank of ", name);
  if (opts_.check_collectives) {
    MPI_Comm check = MPI_COMM_NULL;
    MT_MPI_CHECK(MPI_Comm_dup(comm, &check), "check communicator of ", name);
    g->check_comm = own(check);
  }
  return g;
}

std::shared_ptr<Communicator> MpiWorld::make_group(const std::vector<int>& members,
                                                   const std::string& kind) {
  const std::string name = group_name(kind, members);
  bool sorted = !members.empty();
  bool mine = false;
  for (size_t i = 0; i < members.size(); ++i) {
    sorted &= members[i] >= 0 && members[i] < size_ && (i == 0 || members[i] > members[i - 1]);
    mine |= members[i] == rank_;
  }
  MT_CHECK(sorted && mine, "make_group ", name, ": members must be ascending world ranks ",
           "including this rank (", rank_, ")");

  // MPI_Comm_split has no timeout; a barrier with one first turns "some rank never called
  // make_group" into an error instead of a hang.
  MPI_Request req;
  MT_MPI_CHECK(MPI_Ibarrier(control_->comm, &req), "make_group ", name);
  mpi_wait_with_timeout(control_, &req, "make_group " + name);
  MPI_Comm comm = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_split(control_->comm, members.front(), rank_, &comm), "make_group ", name);
  own(comm);

  // Ranks that passed inconsistent lists end up in a group other than the one they named.
  int n = 0;
  MT_MPI_CHECK(MPI_Comm_size(comm, &n), "make_group ", name);
  std::vector<int> formed(static_cast<size_t>(n));
  MT_MPI_CHECK(MPI_Allgather(&rank_, 1, MPI_INT, formed.data(), 1, MPI_INT, comm), "make_group ",
               name);
  if (formed != members)
    throw RuntimeError(str("make_group: ranks disagree on the members of ", name,
                           ": the ranks that named the same lowest rank form ",
                           group_name(kind, formed)));
  auto group = new_group(comm, members, name);
  group->progress = progress_.get();
  return std::make_shared<MpiCommunicator>(std::move(group));
}

std::shared_ptr<MpiGroup> MpiWorld::split(int color, int key, const std::vector<int>& members,
                                          const std::string& name, int world_rank) {
  MPI_Request req;
  MT_MPI_CHECK(MPI_Ibarrier(control_->comm, &req), "split for ", name);
  mpi_wait_with_timeout(control_, &req, "split for " + name);
  MPI_Comm comm = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_split(control_->comm, color < 0 ? MPI_UNDEFINED : color, key, &comm),
               "split for ", name);
  if (comm == MPI_COMM_NULL) return nullptr;
  own(comm);
  int n = 0;
  MT_MPI_CHECK(MPI_Comm_size(comm, &n), "split for ", name);
  MT_CHECK(n == static_cast<int>(members.size()), "split for ", name, ": ", n,
           " processes joined, expected ", members.size());
  auto g = new_group(comm, members, name);
  g->world_rank = world_rank;
  return g;
}

void MpiWorld::abort(const std::string& why) {
  mpi_abort_once(str("rank ", rank_, ": ", why), 1);
}

bool MpiWorld::agree_on_exit(int status, double wait_s, int* worst, int* best) {
  int mine[2] = {status, -status};
  int all[2] = {0, 0};
  MPI_Request req;
  MT_MPI_CHECK(MPI_Iallreduce(mine, all, 2, MPI_INT, MPI_MAX, control_->comm, &req),
               "exit agreement");
  Stopwatch watch;
  for (int done = 0; !done;) {
    MT_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "exit agreement");
    if (done) break;
    // A rank that is not there yet may be working for a long while; poll gently.
    if (watch.elapsed() > wait_s) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  *worst = all[0];
  *best = -all[1];
  return true;
}

}  // namespace mt
