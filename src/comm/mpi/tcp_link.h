// The few TCP calls the peer watch (comm/mpi/peer_watch.h) needs, outside MPI: a listening
// socket on every interface, this host's IPv4 addresses, a connect with a time limit, and
// sends that never raise SIGPIPE. Every socket is close-on-exec, so that a child process
// can never keep a dead process's connection open.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt::tcp {

// A socket listening on port `*port` (chosen by the kernel) of every IPv4 interface; -1 and
// *why on failure.
int listen_any(uint16_t* port, std::string* why);
// This host's IPv4 addresses (network byte order) of interfaces that are up: others first,
// loopback last (it reaches this host only).
std::vector<uint32_t> local_addresses();
// A connected socket to addr:port within timeout_s, or -1 and *why.
int connect_to(uint32_t addr, uint16_t port, double timeout_s, std::string* why);
// Accepts one pending connection of a listening socket (-1 if none).
int accept_one(int listen_fd);
// Sends all n bytes (false if the peer is gone); never SIGPIPE.
bool send_all(int fd, const void* data, size_t n);
// Waits up to timeout_s for exactly n bytes; false on timeout, error or end of stream.
bool recv_exact(int fd, void* data, size_t n, double timeout_s);
std::string address_text(uint32_t addr);

}  // namespace mt::tcp
