// Which processes of an MPI job are still alive, watched outside MPI, so that the death of
// one (SIGKILL, the out-of-memory killer, a crash) is reported by meshtrain, naming the
// ranks it held, and every other process exits 1 at once.
//
// Open MPI 4 cannot tell a process that a peer died: a collective waiting for it blocks
// until --timeout, while mpirun, seeing the process killed, ends the job with its own text
// ("process rank 1 ... exited on signal 9"), which names the MPI process, not the meshtrain
// ranks it ran (--ranks-per-process K: process p runs ranks p*K .. p*K+K-1). So each process
// holds a TCP connection to process 0, which the kernel closes the moment a process ends,
// whatever ended it; a connection that closes without a word is a death.
//
// Protocol (each message a kind byte and a 32-bit value, network order):
//   'H' p + token   a process's first message (the token, broadcast by process 0 in MPI,
//                   tells a stray connection from a peer); process 0 answers 'A'.
//   'L'             the sender ends on purpose, after printing its own error (MPI_Abort,
//                   exit()): the job is ending, and no death is reported from then on.
//                   Process 0 passes it on to every process.
//   'B'             the sender reached the agreed end of the run.
//   'D' p           (from process 0) process p died: exit 1 without a word.
// Process 0 reports the death of another process, tells the others and exits 1; process 1
// reports the death of process 0 (every survivor sees that one itself). A report waits
// 100 ms first, so that a stop of the whole job (Ctrl-C, the launcher's kill) ends this
// process before it blames a peer, and deaths that come together are named together.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace mt {

class PeerWatch {
 public:
  // Collective over MPI_COMM_WORLD: one thread of every process, after MPI_Init. Without
  // a connection to process 0 the process runs unwatched (a warning says so).
  explicit PeerWatch(int ranks_per_process);
  // Call at the agreed end of the run only (every process reached it): says goodbye.
  ~PeerWatch();
  PeerWatch(const PeerWatch&) = delete;
  PeerWatch& operator=(const PeerWatch&) = delete;

  // This process ends on purpose, having reported its own error (mpi_abort_once, and
  // exit() through an atexit handler): the others must not report it as died. A process
  // has one MPI_COMM_WORLD, hence at most one watch, which this reaches from any thread.
  static void announce_leaving();

  // "ranks 2, 3 (MPI process 1)": who a process is, in meshtrain's terms.
  static std::string describe_process(int process, int ranks_per_process);

 private:
  struct Link {
    int fd = -1;
    int process = -1;    // -1 until its hello arrived
    bool ended = false;  // said 'L' or 'B': its end is no death
    std::string inbox;   // bytes of an incomplete message
  };
  struct Message;

  void setup_hub(uint16_t* port, std::vector<uint32_t>* addresses);
  bool connect_to_hub(const std::vector<uint32_t>& addresses, uint16_t port);
  void watch();
  void accept_link();
  // Reads what arrived; false when the link ended (its fd is closed).
  bool read_link(Link& link, std::vector<int>* dead);
  void handle(Link& link, const Message& m);
  // The pause, then what else arrived; false when the job is ending on purpose.
  bool confirm_deaths(std::vector<int>* dead);
  [[noreturn]] void report_deaths(const std::vector<int>& dead);
  std::vector<Link>::iterator find_link(int fd);  // with mu_ held
  void leave();
  void send_all_locked(char kind, int32_t value);

  int process_ = 0, processes_ = 1, k_ = 1;
  uint64_t token_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor wakes the watcher thread
  std::mutex mu_;           // links_, job_ending_, and every write to a link
  std::vector<Link> links_;
  bool job_ending_ = false;
  std::thread thread_;
};

}  // namespace mt
