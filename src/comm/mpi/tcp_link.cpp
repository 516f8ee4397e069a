#include "comm/mpi/tcp_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/timer.h"

namespace mt::tcp {

namespace {

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// Waits for `events` on fd for at most the rest of timeout_s since `watch` started.
bool wait_for(int fd, short events, const Stopwatch& watch, double timeout_s) {
  for (;;) {
    const double left = timeout_s - watch.elapsed();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left * 1000) + 1);
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

int listen_any(uint16_t* port, std::string* why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *why = errno_text("socket");
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *why = errno_text("bind/listen");
    ::close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

std::vector<uint32_t> local_addresses() {
  std::vector<uint32_t> others, loopback;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (const ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      const uint32_t addr = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      (i->ifa_flags & IFF_LOOPBACK ? loopback : others).push_back(addr);
    }
    ::freeifaddrs(list);
  }
  if (loopback.empty()) loopback.push_back(htonl(INADDR_LOOPBACK));
  others.insert(others.end(), loopback.begin(), loopback.end());
  return others;
}

int connect_to(uint32_t addr, uint16_t port, double timeout_s, std::string* why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    *why = errno_text("socket");
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = addr;
  a.sin_port = htons(port);
  Stopwatch watch;
  int err = 0;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    err = errno;
    if (err == EINPROGRESS && wait_for(fd, POLLOUT, watch, timeout_s)) {
      socklen_t len = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    } else if (err == EINPROGRESS) {
      err = ETIMEDOUT;
    }
  }
  if (err != 0) {
    *why = address_text(addr) + ":" + std::to_string(port) + ": " + std::strerror(err);
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

int accept_one(int listen_fd) {
  return ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
}

bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool recv_exact(int fd, void* data, size_t n, double timeout_s) {
  char* p = static_cast<char*>(data);
  Stopwatch watch;
  while (n > 0) {
    if (!wait_for(fd, POLLIN, watch, timeout_s)) return false;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

std::string address_text(uint32_t addr) {
  char text[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = addr;
  ::inet_ntop(AF_INET, &a, text, sizeof text);
  return text;
}

}  // namespace mt::tcp
