// This process's rank of an MPI job (--backend mpi), and the communicators made from it.
//
// MpiWorld owns every MPI communicator it creates (MPI requires them freed before
// MPI_Finalize, which run_mpi calls): Communicators handed out must not be used after
// run_mpi's function returns. Groups come from MPI_Comm_split of a private duplicate of
// MPI_COMM_WORLD (color = the group's lowest rank, key = global rank), so control traffic
// never mixes with the world() communicator's.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/mpi/background_progress.h"
#include "comm/mpi/mpi_group.h"
#include "comm/world.h"

namespace mt {

// The node-local rank from the launcher's environment (core/launcher.h), or -1 when no
// launcher says.
int launcher_local_rank();

class MpiWorld : public CommWorld {
 public:
  // MPI must be initialised with MPI_THREAD_MULTIPLE (run_mpi does it).
  explicit MpiWorld(const WorldOptions& opts);
  ~MpiWorld() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "mpi"; }
  std::shared_ptr<Communicator> world() override { return world_; }
  std::shared_ptr<Communicator> make_group(const std::vector<int>& members,
                                           const std::string& kind) override;
  [[noreturn]] void abort(const std::string& why) override;
  const WorldOptions& options() const override { return opts_; }

  // Rank among the processes of this node (for pinning, device choice): the launcher's
  // word if it gives one, else MPI's shared-memory split.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // A communicator from a split of the process-wide control communicator, for worlds built
  // on this one (comm/hybrid). Collective over every process, called by one thread of each,
  // in the same order. color < 0: this process joins no communicator in this split (returns
  // nullptr). key orders the ranks; members are the world ranks the new communicator's ranks
  // stand for (its rank i is members[i]), world_rank the rank its messages name.
  std::shared_ptr<MpiGroup> split(int color, int key, const std::vector<int>& members,
                                  const std::string& name, int world_rank);

  // The thread that moves this rank's nonblocking collectives while it computes.
  const BackgroundProgress& progress() const { return *progress_; }

  // End of run: every rank reports its status (0 ok, 2 usage error) and learns the worst
  // and the best. Returns false if not all ranks reported within wait_s.
  bool agree_on_exit(int status, double wait_s, int* worst, int* best);

 private:
  std::shared_ptr<MpiGroup> new_group(MPI_Comm comm, const std::vector<int>& members,
                                      const std::string& name);
  MPI_Comm own(MPI_Comm comm);  // sets MPI_ERRORS_RETURN and frees it on destruction

  WorldOptions opts_;
  int rank_ = 0, size_ = 0, local_rank_ = 0, local_size_ = 1, tag_ub_ = 0;
  std::vector<MPI_Comm> owned_;
  // Before the communicators: it must stop polling before they are freed. The groups of
  // world() and make_group() point to it; split()'s (the hybrid world's) do not.
  std::unique_ptr<BackgroundProgress> progress_;
  std::shared_ptr<MpiGroup> control_;  // world-wide, for splits and the exit agreement
  std::shared_ptr<Communicator> world_;
};

}  // namespace mt
