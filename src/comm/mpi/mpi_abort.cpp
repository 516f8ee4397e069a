#include "comm/mpi/mpi_abort.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "comm/mpi/peer_watch.h"

namespace mt {

void mpi_abort_once(const std::string& line, int code) {
  static std::mutex first;
  if (!first.try_lock()) {
    // Another thread is ending the process (mpirun kills it); wait for that, and end it
    // with the code if it never comes.
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(code);
  }
  // Before the line: the others must know this end is on purpose before it happens.
  PeerWatch::announce_leaving();
  std::fprintf(stderr, "meshtrain: error: %s\n", line.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return here; a broken MPI still ends with the code
}

}  // namespace mt
