#include "comm/mpi/mpi_communicator.h"

#include <climits>
#include <cstring>

#include "comm/mpi/background_progress.h"
#include "comm/mpi/collective_check.h"
#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_work.h"

namespace mt {

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
  }
  throw RuntimeError("unknown dtype");
}

// avg has no MPI op: it is a sum, divided on completion.
MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  throw RuntimeError("unknown reduce op");
}

constexpr size_t kMaxCount = INT_MAX;  // MPI's count argument is an int

char* byte_ptr(void* p) {
  return static_cast<char*>(p);
}
const char* byte_ptr(const void* p) {
  return static_cast<const char*>(p);
}

// Calls issue(offset, n) for consecutive pieces of at most INT_MAX elements (at least one
// call, so a zero count still starts an operation and keeps ranks in step).
template <typename F>
void for_each_piece(size_t count, F issue) {
  size_t off = 0;
  do {
    size_t n = std::min(count - off, kMaxCount);
    issue(off, static_cast<int>(n));
    off += n;
  } while (off < count);
}

void divide(void* buf, size_t count, int n) {
  float* p = static_cast<float*>(buf);
  const float d = static_cast<float>(n);
  for (size_t i = 0; i < count; ++i) p[i] /= d;
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiGroup> group) : group_(std::move(group)) {}

int MpiCommunicator::global_rank(int i) const {
  MT_CHECK(i >= 0 && i < size(), "member ", i, " of group ", name());
  return group_->members[static_cast<size_t>(i)];
}

std::shared_ptr<MpiWork> MpiCommunicator::start_collective(const std::string& what) {
  return std::make_shared<MpiWork>(group_, what);
}

Work MpiCommunicator::finish_collective(std::shared_ptr<MpiWork> work, uint64_t bytes) {
  {
    std::lock_guard lock(group_->order_mutex);
    work->previous = group_->last_collective.lock();
    group_->last_collective = work;
  }
  group_->bytes_sent += bytes;
  group_->calls += 1;
  // Moved while the rank computes, unless the caller waits at once (it progresses it then).
  if (group_->progress && !WaitedAtOnce::active()) group_->progress->watch(work);
  return Work(std::move(work));
}

Work MpiCommunicator::all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) {
  MT_CHECK(op != ReduceOp::avg || t == DType::f32, "avg needs f32, got ", dtype_name(t));
  const uint64_t seq = group_->collective_seq++;
  if (group_->opts.check_collectives)
    check_collective(group_,
                     {CollectiveKind::all_reduce, static_cast<int64_t>(count),
                      static_cast<int64_t>(t), static_cast<int64_t>(op), -1},
                     seq);
  auto work = start_collective(str("all_reduce #", seq, " (", count, " x ", dtype_name(t), ")"));
  const size_t es = dtype_size(t);
  const bool in_place = send == recv;
  for_each_piece(count, [&](size_t off, int n) {
    work->requests.emplace_back();
    MT_MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : byte_ptr(send) + off * es,
                                byte_ptr(recv) + off * es, n, mpi_type(t), mpi_op(op), group_->comm,
                                &work->requests.back()),
                 "all_reduce #", seq, " on group ", name());
  });
  if (op == ReduceOp::avg) {
    const int n = size();
    work->on_complete = [recv, count, n] { divide(recv, count, n); };
  }
  const uint64_t n = static_cast<uint64_t>(size());
  return finish_collective(std::move(work), 2 * (n - 1) * count * es / n);
}

Work MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                                     ReduceOp op) {
  MT_CHECK(op != ReduceOp::avg || t == DType::f32, "avg needs f32, got ", dtype_name(t));
  // Open MPI computes the full count (size() * recv_count) as an int.
  MT_CHECK(recv_count <= kMaxCount / static_cast<size_t>(size()), "reduce_scatter of ", recv_count,
           " elements per rank: the MPI backend supports at most INT_MAX in all");
  const uint64_t seq = group_->collective_seq++;
  if (group_->opts.check_collectives)
    check_collective(group_,
                     {CollectiveKind::reduce_scatter, static_cast<int64_t>(recv_count),
                      static_cast<int64_t>(t), static_cast<int64_t>(op), -1},
                     seq);
  auto work = start_collective(
      str("reduce_scatter #", seq, " (", recv_count, " x ", dtype_name(t), " per rank)"));
  const size_t chunk_bytes = recv_count * dtype_size(t);
  char* own_chunk = const_cast<char*>(byte_ptr(send)) + rank() * chunk_bytes;
  // In place (NCCL's convention, as the local backend): recv is this rank's chunk of send.
  const bool in_place = recv == own_chunk;
  if (!in_place) {
    const char* s = byte_ptr(send);
    const char* r = byte_ptr(recv);
    MT_CHECK(r + chunk_bytes <= s || r >= s + size() * chunk_bytes,
             "reduce_scatter: recv overlaps send but is not this rank's chunk of it");
  }
  // In place, MPI reads the whole buffer and leaves the result at its start.
  void* mpi_recv = in_place ? const_cast<void*>(send) : recv;
  work->requests.emplace_back();
  MT_MPI_CHECK(MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, mpi_recv,
                                         static_cast<int>(recv_count), mpi_type(t), mpi_op(op),
                                         group_->comm, &work->requests.back()),
               "reduce_scatter #", seq, " on group ", name());
  const int n = size();
  const bool move = in_place && own_chunk != mpi_recv;
  const bool avg = op == ReduceOp::avg;
  if (move || avg) {
    work->on_complete = [=] {
      if (move) std::memmove(own_chunk, mpi_recv, chunk_bytes);
      if (avg) divide(recv, recv_count, n);
    };
  }
  return finish_collective(std::move(work), static_cast<uint64_t>(n - 1) * chunk_bytes);
}

Work MpiCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType t) {
  MT_CHECK(send_count <= kMaxCount / static_cast<size_t>(size()), "all_gather of ", send_count,
           " elements per rank: the MPI backend supports at most INT_MAX in all");
  const uint64_t seq = group_->collective_seq++;
  if (group_->opts.check_collectives)
    check_collective(group_,
                     {CollectiveKind::all_gather, static_cast<int64_t>(send_count),
                      static_cast<int64_t>(t), -1, -1},
                     seq);
  auto work = start_collective(
      str("all_gather #", seq, " (", send_count, " x ", dtype_name(t), " per rank)"));
  const size_t chunk_bytes = send_count * dtype_size(t);
  const bool in_place = send == byte_ptr(recv) + rank() * chunk_bytes;
  work->requests.emplace_back();
  MT_MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(send_count),
                              mpi_type(t), recv, static_cast<int>(send_count), mpi_type(t),
                              group_->comm, &work->requests.back()),
               "all_gather #", seq, " on group ", name());
  return finish_collective(std::move(work), static_cast<uint64_t>(size() - 1) * chunk_bytes);
}

Work MpiCommunicator::broadcast(void* buf, size_t count, DType t, int root) {
  MT_CHECK(root >= 0 && root < size(), "broadcast root ", root, " on group ", name());
  const uint64_t seq = group_->collective_seq++;
  if (group_->opts.check_collectives)
    check_collective(
        group_,
        {CollectiveKind::broadcast, static_cast<int64_t>(count), static_cast<int64_t>(t), -1, root},
        seq);
  auto work = start_collective(
      str("broadcast #", seq, " (", count, " x ", dtype_name(t), ", root ", root, ")"));
  const size_t es = dtype_size(t);
  for_each_piece(count, [&](size_t off, int n) {
    work->requests.emplace_back();
    MT_MPI_CHECK(MPI_Ibcast(byte_ptr(buf) + off * es, n, mpi_type(t), root, group_->comm,
                            &work->requests.back()),
                 "broadcast #", seq, " on group ", name());
  });
  // Counted as if the root sent the payload to every other member (as the local backend).
  const uint64_t bytes = rank() == root ? uint64_t(size() - 1) * count * es : 0;
  return finish_collective(std::move(work), bytes);
}

Work MpiCommunicator::all_to_all_v(const void* send, const size_t* send_counts, void* recv,
                                   const size_t* recv_counts, DType t) {
  const int n = size();
  const bool in_place = send == recv;
  const uint64_t seq = group_->collective_seq++;
  if (group_->opts.check_collectives) {
    check_collective(group_, {CollectiveKind::all_to_all_v, -1, static_cast<int64_t>(t), -1, -1},
                     seq);
    check_all_to_all_counts(group_, send_counts, recv_counts, seq);
  }
  auto work = start_collective(str("all_to_all_v #", seq, " (", dtype_name(t), ")"));
  // MPI reads counts and displacements until completion, so they live in the Work.
  std::vector<int>& v = work->scratch;
  v.assign(4 * static_cast<size_t>(n), 0);
  int* sc = v.data();
  int* sd = sc + n;
  int* rc = sd + n;
  int* rd = rc + n;
  size_t s_off = 0, r_off = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < n; ++i) {
    MT_CHECK(!in_place || send_counts[i] == recv_counts[i],
             "all_to_all_v in place needs send_counts == recv_counts");
    MT_CHECK(s_off + send_counts[i] <= kMaxCount && r_off + recv_counts[i] <= kMaxCount,
             "all_to_all_v beyond INT_MAX elements is not supported by the MPI backend");
    sc[i] = static_cast<int>(send_counts[i]);
    sd[i] = static_cast<int>(s_off);
    rc[i] = static_cast<int>(recv_counts[i]);
    rd[i] = static_cast<int>(r_off);
    s_off += send_counts[i];
    r_off += recv_counts[i];
    if (i != rank()) bytes += send_counts[i] * dtype_size(t);
  }
  work->requests.emplace_back();
  MT_MPI_CHECK(MPI_Ialltoallv(in_place ? MPI_IN_PLACE : send, sc, sd, mpi_type(t), recv, rc, rd,
                              mpi_type(t), group_->comm, &work->requests.back()),
               "all_to_all_v #", seq, " on group ", name());
  return finish_collective(std::move(work), bytes);
}

Work MpiCommunicator::barrier() {
  const uint64_t seq = group_->collective_seq++;
  if (group_->opts.check_collectives)
    check_collective(group_, {CollectiveKind::barrier, 0, -1, -1, -1}, seq);
  auto work = start_collective(str("barrier #", seq));
  work->requests.emplace_back();
  MT_MPI_CHECK(MPI_Ibarrier(group_->comm, &work->requests.back()), "barrier #", seq, " on group ",
               name());
  return finish_collective(std::move(work), 0);
}

std::shared_ptr<MpiWork> MpiCommunicator::start_p2p(const char* op, const char* dir, int peer,
                                                    int tag, size_t count, DType t) {
  MT_CHECK(peer >= 0 && peer < size(), op, " ", dir, " rank ", peer, " on group ", name());
  MT_CHECK(tag >= 0 && tag <= group_->tag_ub, op, " tag ", tag, " outside MPI's range 0..",
           group_->tag_ub);
  const uint64_t seq = group_->p2p_seq++;
  group_->calls += 1;
  auto work =
      std::make_shared<MpiWork>(group_, str(op, " #", seq, " (", count, " x ", dtype_name(t), ") ",
                                            dir, " rank ", global_rank(peer), " tag ", tag));
  // Completes after the collectives issued before it (as in the local backend), but later
  // collectives do not wait for it: a pipeline posts receives long before they match.
  std::lock_guard lock(group_->order_mutex);
  work->previous = group_->last_collective.lock();
  return work;
}

Work MpiCommunicator::send(const void* buf, size_t count, DType t, int peer, int tag) {
  auto work = start_p2p("send", "to", peer, tag, count, t);
  const size_t es = dtype_size(t);
  for_each_piece(count, [&](size_t off, int n) {
    work->requests.emplace_back();
    MT_MPI_CHECK(MPI_Isend(byte_ptr(buf) + off * es, n, mpi_type(t), peer, tag, group_->comm,
                           &work->requests.back()),
                 "send to ", peer, " on group ", name());
  });
  if (peer != rank()) group_->bytes_sent += count * es;
  return Work(std::move(work));
}

Work MpiCommunicator::recv(void* buf, size_t count, DType t, int peer, int tag) {
  auto work = start_p2p("recv", "from", peer, tag, count, t);
  const size_t es = dtype_size(t);
  for_each_piece(count, [&](size_t off, int n) {
    work->requests.emplace_back();
    MT_MPI_CHECK(MPI_Irecv(byte_ptr(buf) + off * es, n, mpi_type(t), peer, tag, group_->comm,
                           &work->requests.back()),
                 "recv from ", peer, " on group ", name());
  });
  return Work(std::move(work));
}

CommStats MpiCommunicator::stats() const {
  CommStats s;
  s.bytes_sent = group_->bytes_sent.load();
  s.calls = group_->calls.load();
  s.wait_seconds = static_cast<double>(group_->wait_ns.load()) * 1e-9;
  return s;
}

void MpiCommunicator::reset_stats() {
  group_->bytes_sent = 0;
  group_->calls = 0;
  group_->wait_ns = 0;
}

}  // namespace mt
