// Checks of every Communicator operation with exact expected results, shared by the
// drivers that run under mpirun (comm_mpi_driver: one rank per process; comm_hybrid_driver:
// several ranks per process). A wrong result throws a RuntimeError describing it.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/error.h"

namespace mt::comm_checks {

// Small integers, so sums are exact in every type (u8 included: at most 4 ranks * 11).
inline int value(int rank, size_t i) {
  return static_cast<int>((rank * 3 + i) % 11) + 1;
}

template <typename T>
inline void expect_eq(const std::vector<T>& got, const std::vector<T>& want,
                      const std::string& what) {
  MT_CHECK(got.size() == want.size(), what);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      throw RuntimeError(str(what, ": element ", i, " is ", +got[i], ", expected ", +want[i]));
}

template <typename T>
inline T reduce_values(int n, size_t i, ReduceOp op) {
  T acc = static_cast<T>(value(0, i));
  for (int r = 1; r < n; ++r) {
    T v = static_cast<T>(value(r, i));
    if (op == ReduceOp::max)
      acc = std::max(acc, v);
    else if (op == ReduceOp::min)
      acc = std::min(acc, v);
    else
      acc = static_cast<T>(acc + v);
  }
  if (op == ReduceOp::avg) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

template <typename T>
inline void check_all_reduce(Communicator& c, size_t count, ReduceOp op, bool in_place) {
  const int n = c.size(), r = c.rank();
  std::vector<T> send(count), recv(count), want(count);
  for (size_t i = 0; i < count; ++i) {
    send[i] = static_cast<T>(value(r, i));
    want[i] = reduce_values<T>(n, i, op);
  }
  std::vector<T>& out = in_place ? send : recv;
  c.all_reduce(send.data(), out.data(), count, dtype_of<T>(), op).wait();
  expect_eq(out, want,
            str(c.name(), " all_reduce ", dtype_name(dtype_of<T>()), " ", reduce_op_name(op),
                " count ", count, in_place ? " in place" : ""));
}

template <typename T>
inline void check_reduce_scatter(Communicator& c, size_t count, bool in_place) {
  const int n = c.size(), r = c.rank();
  std::vector<T> send(count * n), recv(count), want(count);
  for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<T>(value(r, i));
  for (size_t j = 0; j < count; ++j) want[j] = reduce_values<T>(n, r * count + j, ReduceOp::sum);
  T* out = in_place ? send.data() + r * count : recv.data();
  c.reduce_scatter(send.data(), out, count, dtype_of<T>(), ReduceOp::sum).wait();
  expect_eq(std::vector<T>(out, out + count), want,
            str(c.name(), " reduce_scatter count ", count, in_place ? " in place" : ""));
}

template <typename T>
inline void check_all_gather(Communicator& c, size_t count, bool in_place) {
  const int n = c.size(), r = c.rank();
  std::vector<T> send(count), recv(count * n), want(count * n);
  for (int q = 0; q < n; ++q)
    for (size_t j = 0; j < count; ++j) want[q * count + j] = static_cast<T>(value(q, j));
  for (size_t j = 0; j < count; ++j) send[j] = want[r * count + j];
  if (in_place) std::copy(send.begin(), send.end(), recv.begin() + r * count);
  const T* src = in_place ? recv.data() + r * count : send.data();
  c.all_gather(src, recv.data(), count, dtype_of<T>()).wait();
  expect_eq(recv, want, str(c.name(), " all_gather count ", count, in_place ? " in place" : ""));
}

inline void check_broadcast(Communicator& c, size_t count) {
  for (int root = 0; root < c.size(); ++root) {
    std::vector<float> buf(count), want(count);
    for (size_t i = 0; i < count; ++i) want[i] = static_cast<float>(value(root, i));
    if (c.rank() == root) buf = want;
    c.broadcast(buf.data(), count, DType::f32, root).wait();
    expect_eq(buf, want, str(c.name(), " broadcast root ", root, " count ", count));
  }
}

// Rank q sends count + (q + j) % 3 elements to rank j (symmetric, so in place works too),
// element k of that block being 100*q + 10*j + k % 10.
inline void check_all_to_all(Communicator& c, size_t count, bool in_place) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> sc(n), rc(n);
  std::vector<int32_t> send, want;
  for (int j = 0; j < n; ++j) {
    sc[j] = count + (r + j) % 3;
    rc[j] = count + (j + r) % 3;
    for (size_t k = 0; k < sc[j]; ++k) send.push_back(int32_t(100 * r + 10 * j + k % 10));
    for (size_t k = 0; k < rc[j]; ++k) want.push_back(int32_t(100 * j + 10 * r + k % 10));
  }
  std::vector<int32_t> recv(want.size());
  if (in_place) recv = send;
  c.all_to_all_v(in_place ? recv.data() : send.data(), sc.data(), recv.data(), rc.data(),
                 DType::i32)
      .wait();
  expect_eq(recv, want, str(c.name(), " all_to_all_v count ", count, in_place ? " in place" : ""));
}

// Rank 0 sends nothing and receives from everyone else (an MoE rank none of whose rows go
// anywhere, docs/moe.md): its empty send must not alias its receive buffer.
inline void check_all_to_all_silent_sender(Communicator& c, size_t count) {
  const int n = c.size(), r = c.rank();
  std::vector<size_t> sc(n, r == 0 ? 0 : count), rc(n, count);
  rc[0] = 0;
  std::vector<int32_t> send, want;
  for (int j = 0; j < n; ++j)
    for (size_t k = 0; k < sc[j]; ++k) send.push_back(int32_t(100 * r + 10 * j + k % 10));
  for (int q = 1; q < n; ++q)
    for (size_t k = 0; k < count; ++k) want.push_back(int32_t(100 * q + 10 * r + k % 10));
  std::vector<int32_t> recv(want.size());
  c.all_to_all_v(send.data(), sc.data(), recv.data(), rc.data(), DType::i32).wait();
  expect_eq(recv, want, str(c.name(), " all_to_all_v from silent rank 0, count ", count));
}

// Two messages to the same peer with different tags, received in the opposite order:
// tags, not arrival order, must decide which buffer gets which.
inline void check_send_recv(Communicator& c, size_t count) {
  const int n = c.size(), r = c.rank();
  std::vector<float> mine(count, 5.0f), back(count);
  Work self_recv = c.recv(back.data(), count, DType::f32, r, make_p2p_tag(P2PKind::user, 0, 1));
  c.send(mine.data(), count, DType::f32, r, make_p2p_tag(P2PKind::user, 0, 1)).wait();
  self_recv.wait();
  expect_eq(back, mine, str(c.name(), " send to self"));
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int tag_a = make_p2p_tag(P2PKind::activation, 1, 7);
  const int tag_g = make_p2p_tag(P2PKind::gradient, 1, 7);
  std::vector<float> act(count, float(r)), grad(count, float(-r));
  std::vector<float> got_act(count), got_grad(count);
  Work rg = c.recv(got_grad.data(), count, DType::f32, prev, tag_g);
  Work ra = c.recv(got_act.data(), count, DType::f32, prev, tag_a);
  Work sa = c.send(act.data(), count, DType::f32, next, tag_a);
  Work sg = c.send(grad.data(), count, DType::f32, next, tag_g);
  ra.wait();
  rg.wait();
  sa.wait();
  sg.wait();
  expect_eq(got_act, std::vector<float>(count, float(prev)), str(c.name(), " recv activation"));
  expect_eq(got_grad, std::vector<float>(count, float(-prev)), str(c.name(), " recv gradient"));
}

// Exact byte counts hold for the flat backends; a hierarchical group counts its parts.
inline void check_stats(Communicator& c) {
  c.reset_stats();
  std::vector<float> buf(1000, 1.0f);
  c.all_reduce(std::span<float>(buf), ReduceOp::sum).wait();
  // A ring exchange of 10 floats: a send counts its payload, a receive nothing.
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  Work r = c.recv(buf.data(), 10, DType::f32, prev, 0);
  c.send(buf.data() + 10, 10, DType::f32, next, 0).wait();
  r.wait();
  const uint64_t n = c.size(), want = 2 * (n - 1) * 4000 / n + (n > 1 ? 40 : 0);
  CommStats s = c.stats();
  MT_CHECK(s.bytes_sent == want && s.calls == 3, c.name(), " stats: ", s.bytes_sent, " bytes in ",
           s.calls, " calls, expected ", want, " in 3");
}

// in_place_a2a: false for the local backend's communicators, which refuse an in-place
// all_to_all_v (the hybrid world's groups inside one process).
inline void run_suite(Communicator& c, bool quick, bool exact_stats = true,
                      bool in_place_a2a = true) {
  std::vector<size_t> counts = {0, 1, 7, 1000};
  if (!quick) counts.push_back((1u << 20) + 3);
  for (size_t count : counts) {
    const bool big = count > 1000;
    for (bool in_place : {false, true}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min})
        if (!big || op == ReduceOp::sum) check_all_reduce<float>(c, count, op, in_place);
      if (!big) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
          check_all_reduce<int32_t>(c, count, op, in_place);
          check_all_reduce<int64_t>(c, count, op, in_place);
          check_all_reduce<uint8_t>(c, count, op, in_place);
        }
        check_reduce_scatter<int64_t>(c, count, in_place);
        check_all_gather<uint8_t>(c, count, in_place);
      }
      check_reduce_scatter<float>(c, count, in_place);
      check_all_gather<float>(c, count, in_place);
      if (!in_place || in_place_a2a) check_all_to_all(c, count, in_place);
    }
    check_broadcast(c, count);
    check_send_recv(c, count);
    if (count > 0) check_all_to_all_silent_sender(c, count);
    c.barrier().wait();
  }
  if (exact_stats) check_stats(c);
}

// Issues several collectives before waiting on any, then waits in reverse: completion must
// still be in issue order, and each result right.
inline void check_pipelined(Communicator& c) {
  const int n = c.size();
  std::vector<std::vector<float>> bufs(8, std::vector<float>(4099));
  std::vector<Work> works;
  for (size_t k = 0; k < bufs.size(); ++k) {
    std::fill(bufs[k].begin(), bufs[k].end(), float(k + c.rank()));
    works.push_back(c.all_reduce(std::span<float>(bufs[k]), ReduceOp::sum));
  }
  for (size_t k = bufs.size(); k-- > 0;) {
    works[k].wait();
    for (size_t j = 0; j < k; ++j) MT_CHECK(works[j].test(), "collective ", j, " not complete");
  }
  for (size_t k = 0; k < bufs.size(); ++k) {
    const float want = float(n * k + n * (n - 1) / 2);
    expect_eq(bufs[k], std::vector<float>(4099, want), str(c.name(), " pipelined #", k));
  }
}

}  // namespace mt::comm_checks
