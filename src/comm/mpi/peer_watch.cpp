#include "comm/mpi/peer_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <mpi.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "comm/mpi/tcp_link.h"
#include "core/error.h"
#include "core/timer.h"

namespace mt {

struct PeerWatch::Message {
  char kind = 0;
  int32_t value = 0;
  uint64_t token = 0;
  static constexpr size_t kBytes = 13;

  std::string bytes() const {
    std::string out(kBytes, '\0');
    const uint32_t v = htonl(static_cast<uint32_t>(value));
    const uint32_t hi = htonl(static_cast<uint32_t>(token >> 32)), lo = htonl(uint32_t(token));
    out[0] = kind;
    std::memcpy(&out[1], &v, 4);
    std::memcpy(&out[5], &hi, 4);
    std::memcpy(&out[9], &lo, 4);
    return out;
  }
  static Message parse(const char* p) {
    uint32_t v = 0, hi = 0, lo = 0;
    std::memcpy(&v, p + 1, 4);
    std::memcpy(&hi, p + 5, 4);
    std::memcpy(&lo, p + 9, 4);
    return {p[0], static_cast<int32_t>(ntohl(v)), (uint64_t(ntohl(hi)) << 32) | ntohl(lo)};
  }
};

namespace {

// The watch of this process, for announce_leaving (see the header) and the atexit handler.
std::atomic<PeerWatch*>& active_watch() {
  static std::atomic<PeerWatch*> watch{nullptr};
  return watch;
}

void announce_at_exit() {
  PeerWatch::announce_leaving();
}

// What process 0 broadcasts: where it listens, and the job's token.
struct HubAddress {
  static constexpr int kMaxAddresses = 16;
  int count = 0;  // 0: process 0 could not listen; nobody is watched
  uint32_t port = 0;
  uint32_t addresses[kMaxAddresses] = {};
  uint64_t token = 0;
};

}  // namespace

// Leaving only sets a flag and writes a byte per link: safe from any thread, at any time
// before the watch is destroyed (which clears active_watch() first).
void PeerWatch::announce_leaving() {
  if (PeerWatch* w = active_watch().load()) w->leave();
}

std::string PeerWatch::describe_process(int process, int ranks_per_process) {
  const int first = process * ranks_per_process, last = first + ranks_per_process - 1;
  std::string ranks;
  if (ranks_per_process == 1) {
    ranks = str("rank ", first);
  } else if (ranks_per_process <= 4) {
    ranks = "ranks ";
    for (int r = first; r <= last; ++r) ranks += str(r == first ? "" : ", ", r);
  } else {
    ranks = str("ranks ", first, "..", last);
  }
  return str(ranks, " (MPI process ", process, ")");
}

PeerWatch::PeerWatch(int ranks_per_process) : k_(ranks_per_process) {
  MPI_Comm_rank(MPI_COMM_WORLD, &process_);
  MPI_Comm_size(MPI_COMM_WORLD, &processes_);
  if (processes_ < 2) return;
  HubAddress hub;
  if (process_ == 0) {
    uint16_t port = 0;
    std::vector<uint32_t> addresses;
    setup_hub(&port, &addresses);
    hub.count = std::min<int>(static_cast<int>(addresses.size()), HubAddress::kMaxAddresses);
    hub.port = port;
    std::copy(addresses.begin(), addresses.begin() + hub.count, hub.addresses);
    hub.token = token_;
  }
  MPI_Bcast(&hub, sizeof hub, MPI_BYTE, 0, MPI_COMM_WORLD);
  token_ = hub.token;
  bool linked = process_ == 0 || hub.count == 0;
  if (process_ != 0 && hub.count > 0)
    linked =
        connect_to_hub({hub.addresses, hub.addresses + hub.count}, static_cast<uint16_t>(hub.port));
  // Every link exists before any rank starts, so that no early death goes unseen.
  MPI_Barrier(MPI_COMM_WORLD);
  if (!linked || hub.count == 0) return;
  if (process_ != 0 && ::pipe2(wake_, O_CLOEXEC) != 0) return;
  static const bool at_exit = std::atexit(announce_at_exit) == 0;
  (void)at_exit;
  active_watch().store(this);
  if (process_ != 0) thread_ = std::thread([this] { watch(); });
}

void PeerWatch::setup_hub(uint16_t* port, std::vector<uint32_t>* addresses) {
  std::string why;
  listen_fd_ = tcp::listen_any(port, &why);
  if (listen_fd_ < 0 || ::pipe2(wake_, O_CLOEXEC) != 0) {
    std::fprintf(stderr,
                 "meshtrain: warning: MPI process 0 cannot listen for its peers (%s): a process "
                 "that dies will be named by the launcher only\n",
                 why.c_str());
    return;
  }
  *addresses = tcp::local_addresses();
  token_ = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  // The hub answers hellos while the others connect, before the barrier.
  thread_ = std::thread([this] { watch(); });
}

bool PeerWatch::connect_to_hub(const std::vector<uint32_t>& addresses, uint16_t port) {
  std::string tried;
  // One budget for every address, so that a firewall that drops connections delays the
  // start by seconds, not by seconds per address.
  const double budget_s = 5;
  Stopwatch watch;
  for (uint32_t a : addresses) {
    const double left = budget_s - watch.elapsed();
    if (left <= 0) break;
    std::string why;
    const int fd = tcp::connect_to(a, port, left, &why);
    char ack[Message::kBytes];
    // The token and the answer tell process 0 from another listener on the same port of an
    // address this host also has (a container bridge, say).
    if (fd >= 0 &&
        tcp::send_all(fd, Message{'H', process_, token_}.bytes().data(), Message::kBytes) &&
        tcp::recv_exact(fd, ack, sizeof ack, std::max(0.5, budget_s - watch.elapsed())) &&
        ack[0] == 'A') {
      std::lock_guard lock(mu_);
      links_.push_back({fd, 0, false, ""});
      return true;
    }
    if (fd >= 0) ::close(fd);
    tried +=
        (tried.empty() ? "" : "; ") + (why.empty() ? tcp::address_text(a) + ": no answer" : why);
  }
  std::fprintf(stderr,
               "meshtrain: warning: MPI process %d cannot reach MPI process 0 (%s): a process "
               "that dies will be named by the launcher only\n",
               process_, tried.c_str());
  return false;
}

PeerWatch::~PeerWatch() {
  if (active_watch().load() == this) active_watch().store(nullptr);
  if (thread_.joinable()) {
    const char stop = 1;
    (void)!::write(wake_[1], &stop, 1);
    thread_.join();
  }
  std::lock_guard lock(mu_);
  send_all_locked('B', 0);
  for (Link& l : links_)
    if (l.fd >= 0) ::close(l.fd);
  for (int fd : {listen_fd_, wake_[0], wake_[1]})
    if (fd >= 0) ::close(fd);
}

void PeerWatch::send_all_locked(char kind, int32_t value) {
  const std::string m = Message{kind, value, 0}.bytes();
  for (Link& l : links_)
    if (l.fd >= 0 && l.process >= 0) tcp::send_all(l.fd, m.data(), m.size());
}

void PeerWatch::leave() {
  std::lock_guard lock(mu_);
  if (job_ending_) return;
  job_ending_ = true;
  send_all_locked('L', 0);
}

void PeerWatch::watch() {
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    if (listen_fd_ >= 0) fds.push_back({listen_fd_, POLLIN, 0});
    {
      std::lock_guard lock(mu_);
      for (const Link& l : links_) fds.push_back({l.fd, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
    if (fds[0].revents) return;
    if (listen_fd_ >= 0 && fds[1].revents) accept_link();
    std::vector<int> dead;
    {
      std::lock_guard lock(mu_);
      for (const pollfd& p : fds) {
        if (!p.revents || p.fd == wake_[0] || p.fd == listen_fd_) continue;
        auto it = find_link(p.fd);
        if (it != links_.end() && !read_link(*it, &dead)) links_.erase(it);
      }
      if (job_ending_) dead.clear();
    }
    // Once the job ends on purpose, deaths are its consequences: the watch has done its work.
    if (!dead.empty() && !confirm_deaths(&dead)) return;
    if (!dead.empty()) report_deaths(dead);
  }
}

void PeerWatch::accept_link() {
  const int fd = tcp::accept_one(listen_fd_);
  if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
    // Out of file descriptors: the connection stays pending and would wake poll forever.
    // The processes not yet linked find no answer and run unwatched, with a warning.
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
  if (fd < 0) return;
  std::lock_guard lock(mu_);
  links_.push_back({fd, -1, false, ""});
}

bool PeerWatch::read_link(Link& link, std::vector<int>* dead) {
  char buf[256];
  const ssize_t got = ::recv(link.fd, buf, sizeof buf, MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (got <= 0) {
    if (!link.ended && link.process >= 0) dead->push_back(link.process);
    ::close(link.fd);
    return false;
  }
  link.inbox.append(buf, static_cast<size_t>(got));
  size_t used = 0;
  for (; link.inbox.size() - used >= Message::kBytes; used += Message::kBytes)
    handle(link, Message::parse(link.inbox.data() + used));
  link.inbox.erase(0, used);
  return true;
}

// Called with mu_ held.
void PeerWatch::handle(Link& link, const Message& m) {
  switch (m.kind) {
    case 'H':  // process 0: a peer introduces itself
      if (link.process < 0 && m.token == token_ && m.value > 0 && m.value < processes_) {
        link.process = m.value;
        tcp::send_all(link.fd, Message{'A', 0, 0}.bytes().data(), Message::kBytes);
      }
      break;
    case 'L':  // the job is ending on purpose: pass it on, report nothing from now on
      link.ended = true;
      if (!job_ending_ && process_ == 0) send_all_locked('L', 0);
      job_ending_ = true;
      break;
    case 'B':
      link.ended = true;
      break;
    case 'D':  // process 0 reported a death and tells this process to stop
      std::_Exit(1);
    default:
      break;
  }
}

bool PeerWatch::confirm_deaths(std::vector<int>* dead) {
  // A stop of the whole job ends this process within the pause; deaths that come together
  // arrive in it too.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<pollfd> fds;
  std::lock_guard lock(mu_);
  for (const Link& l : links_) fds.push_back({l.fd, POLLIN, 0});
  if (!fds.empty()) ::poll(fds.data(), fds.size(), 0);
  for (const pollfd& p : fds) {
    auto it = find_link(p.fd);
    if (p.revents && it != links_.end() && !read_link(*it, dead)) links_.erase(it);
  }
  std::sort(dead->begin(), dead->end());
  dead->erase(std::unique(dead->begin(), dead->end()), dead->end());
  return !job_ending_;
}

void PeerWatch::report_deaths(const std::vector<int>& dead) {
  std::lock_guard lock(mu_);
  if (process_ == 0) send_all_locked('D', dead.front());
  if (process_ == 0 || process_ == 1) {
    std::string who;
    for (size_t i = 0; i < dead.size(); ++i)
      who += (i == 0 ? "" : " and ") + describe_process(dead[i], k_);
    std::fprintf(stderr,
                 "meshtrain: error: %s died without reporting an error (killed by a signal, "
                 "e.g. SIGKILL or the out-of-memory killer, or crashed); the run cannot "
                 "continue without %s, so every process stops\n",
                 who.c_str(), dead.size() == 1 ? "it" : "them");
    std::fflush(stderr);
  }
  std::_Exit(1);
}

std::vector<PeerWatch::Link>::iterator PeerWatch::find_link(int fd) {
  return std::find_if(links_.begin(), links_.end(), [fd](const Link& l) { return l.fd == fd; });
}

}  // namespace mt
