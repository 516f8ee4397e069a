#include "comm/local/local_communicator.h"

#include <exception>

#include "comm/local/collective_op.h"
#include "comm/local/local_job.h"
#include "comm/local/local_work.h"
#include "core/error.h"
#include "core/timer.h"

namespace mt::local {

LocalCommunicator::LocalCommunicator(std::shared_ptr<GroupState> group, int global_rank)
    : group_(std::move(group)),
      job_(group_->job),
      me_(-1),
      global_rank_(global_rank),
      stats_(std::make_shared<Stats>()),
      queue_() {
  for (size_t i = 0; i < group_->members.size(); ++i)
    if (group_->members[i] == global_rank) me_ = static_cast<int>(i);
  MT_CHECK(me_ >= 0, "rank ", global_rank, " is not a member of ", group_->name);
  queue_ = std::make_shared<OpQueue>(group_, me_, job_.wait_policy(), job_.options().timeout_s);
}

// Unfinished calls still run (peers may be waiting for them); after a failure they fail
// fast, so this cannot hang longer than a timeout. Destroyed by an exception with calls
// pending, this rank is failing: say so now, as the peers may be blocked waiting for it.
LocalCommunicator::~LocalCommunicator() {
  if (std::uncaught_exceptions() > 0 && !queue_->done(queue_->issued()))
    job_.fail(global_rank_,
              std::make_exception_ptr(RuntimeError(
                  str("rank ", global_rank_, ": failed with calls pending on ", group_->name))),
              LocalJob::FailKind::provisional);
  queue_->stop();
}

std::string LocalCommunicator::where(const char* op, uint64_t seq) const {
  return str("rank ", global_rank_, ": ", op, " #", seq, " on group ", group_->name);
}

// ---- issue ----------------------------------------------------------------------------

namespace {

void require_buffer(const void* p, size_t count, const char* what) {
  MT_CHECK(p != nullptr || count == 0, what, " buffer is null but count is ", count);
}

}  // namespace

Work LocalCommunicator::all_reduce(const void* send, void* recv, size_t count, DType t,
                                   ReduceOp op) {
  require_buffer(send, count, "all_reduce send");
  require_buffer(recv, count, "all_reduce recv");
  MT_CHECK(op != ReduceOp::avg || t == DType::f32, "all_reduce avg needs f32, got ", dtype_name(t));
  const int n = size();
  // Reduce-scatter then all-gather: each rank sends (n-1)/n of the buffer in each half.
  const uint64_t bytes = 2 * uint64_t(n - 1) * count * dtype_size(t) / n;
  return submit({OpCode::all_reduce, t, op, 0, count, send, recv, nullptr, nullptr}, bytes);
}

Work LocalCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                                       ReduceOp op) {
  require_buffer(send, recv_count, "reduce_scatter send");
  require_buffer(recv, recv_count, "reduce_scatter recv");
  MT_CHECK(op != ReduceOp::avg || t == DType::f32, "reduce_scatter avg needs f32, got ",
           dtype_name(t));
  const uint64_t bytes = uint64_t(size() - 1) * recv_count * dtype_size(t);
  return submit({OpCode::reduce_scatter, t, op, 0, recv_count, send, recv, nullptr, nullptr},
                bytes);
}

Work LocalCommunicator::all_gather(const void* send, void* recv, size_t send_count, DType t) {
  require_buffer(send, send_count, "all_gather send");
  require_buffer(recv, send_count, "all_gather recv");
  const uint64_t bytes = uint64_t(size() - 1) * send_count * dtype_size(t);
  return submit({OpCode::all_gather, t, ReduceOp::sum, 0, send_count, send, recv, nullptr, nullptr},
                bytes);
}

Work LocalCommunicator::broadcast(void* buf, size_t count, DType t, int root) {
  require_buffer(buf, count, "broadcast");
  MT_CHECK(root >= 0 && root < size(), "broadcast root ", root, " outside ", group_->name);
  const uint64_t bytes = root == me_ ? uint64_t(size() - 1) * count * dtype_size(t) : 0;
  return submit({OpCode::broadcast, t, ReduceOp::sum, root, count, buf, buf, nullptr, nullptr},
                bytes);
}

Work LocalCommunicator::all_to_all_v(const void* send, const size_t* send_counts, void* recv,
                                     const size_t* recv_counts, DType t) {
  MT_CHECK(send_counts && recv_counts, "all_to_all_v needs both count arrays");
  size_t total_send = 0, total_recv = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < size(); ++i) {
    total_send += send_counts[i];
    total_recv += recv_counts[i];
    if (i != me_) bytes += send_counts[i] * dtype_size(t);
  }
  require_buffer(send, total_send, "all_to_all_v send");
  require_buffer(recv, total_recv, "all_to_all_v recv");
  MT_CHECK(send != recv || total_send + total_recv == 0, "all_to_all_v cannot run in place");
  return submit(
      {OpCode::all_to_all_v, t, ReduceOp::sum, 0, total_send, send, recv, send_counts, recv_counts},
      bytes);
}

Work LocalCommunicator::barrier() {
  return submit(
      {OpCode::barrier, DType::u8, ReduceOp::sum, 0, 0, nullptr, nullptr, nullptr, nullptr}, 0);
}

Work LocalCommunicator::submit(const CollDesc& d, uint64_t bytes_sent) {
  stats_->calls.fetch_add(1, std::memory_order_relaxed);
  stats_->bytes_sent.fetch_add(bytes_sent, std::memory_order_relaxed);
  const uint64_t seq = next_seq_++;
  auto status = std::make_shared<OpStatus>();
  const uint64_t ticket = queue_->push(std::make_shared<CollectiveOp>(*this, d, seq, status));
  return Work(std::make_shared<CollectiveWork>(queue_, ticket, status, stats_));
}

// ---- phases -----------------------------------------------------------------------------

void LocalCommunicator::arrive(uint64_t seq, uint64_t phase) {
  group_->arrived[me_].value.store(seq * kPhasesPerOp + phase);
  group_->bell.ring();
}

// ---- execution --------------------------------------------------------------------------

namespace {

std::string describe(const CollDesc& d) {
  std::string s = str(op_name(d.op), "(");
  switch (d.op) {
    case OpCode::barrier:
      break;
    case OpCode::all_reduce:
    case OpCode::reduce_scatter:
      s += str("count ", d.count, ", ", dtype_name(d.dtype), ", ", reduce_op_name(d.reduce));
      break;
    case OpCode::broadcast:
      s += str("count ", d.count, ", ", dtype_name(d.dtype), ", root ", d.root);
      break;
    case OpCode::all_gather:
    case OpCode::all_to_all_v:
      s += str("count ", d.count, ", ", dtype_name(d.dtype));
      break;
  }
  return s + ")";
}

bool agree(const CollDesc& a, const CollDesc& b) {
  if (a.op != b.op) return false;
  switch (a.op) {
    case OpCode::barrier:
      return true;
    case OpCode::all_reduce:
    case OpCode::reduce_scatter:
      return a.count == b.count && a.dtype == b.dtype && a.reduce == b.reduce;
    case OpCode::broadcast:
      return a.count == b.count && a.dtype == b.dtype && a.root == b.root;
    case OpCode::all_gather:
      return a.count == b.count && a.dtype == b.dtype;
    case OpCode::all_to_all_v:
      return a.dtype == b.dtype;  // counts are checked pairwise
  }
  return false;
}

}  // namespace

// Peers read each other's buffers with their own counts, so a disagreement would read out
// of bounds: in shared memory the check costs nothing, so it always runs (the debug mode
// of the MPI backend needs an extra exchange for the same check). Every member compares all
// descriptors against member 0's, so all of them report the same first mismatch.
void LocalCommunicator::verify_agreement(const CollDesc& d, uint64_t seq) const {
  const int n = size();
  const CollDesc& ref = peer(0, seq);
  for (int i = 1; i < n; ++i) {
    const CollDesc& other = peer(i, seq);
    if (!agree(ref, other))
      throw RuntimeError(str(where(op_name(d.op), seq), ": mismatched collective: rank ",
                             group_->members[0], " called ", describe(ref), " but rank ",
                             group_->members[i], " called ", describe(other)));
  }
  if (d.op != OpCode::all_to_all_v) return;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const size_t sent = peer(i, seq).send_counts[j], expected = peer(j, seq).recv_counts[i];
      if (sent != expected)
        throw RuntimeError(str(where(op_name(d.op), seq), ": mismatched all_to_all_v: rank ",
                               group_->members[i], " sends ", sent, " elements to rank ",
                               group_->members[j], ", which expects ", expected));
    }
}

void LocalCommunicator::publish(const CollDesc& d, uint64_t seq) {
  group_->desc[me_][seq % 2] = d;
  arrive(seq, 1);
}

void LocalCommunicator::run_share(const CollDesc& d, uint64_t seq) {
  switch (d.op) {
    case OpCode::barrier:
      break;
    case OpCode::all_reduce:
      run_all_reduce(d, seq);
      break;
    case OpCode::reduce_scatter:
      run_reduce_scatter(d, seq);
      break;
    case OpCode::all_gather:
      run_all_gather(d, seq);
      break;
    case OpCode::broadcast:
      run_broadcast(d, seq);
      break;
    case OpCode::all_to_all_v:
      run_all_to_all_v(d, seq);
      break;
  }
}

// ---- stats ------------------------------------------------------------------------------

CommStats LocalCommunicator::stats() const {
  CommStats s;
  s.bytes_sent = stats_->bytes_sent.load();
  s.calls = stats_->calls.load();
  s.wait_seconds = stats_->wait_seconds.load();
  return s;
}

void LocalCommunicator::reset_stats() {
  stats_->bytes_sent.store(0);
  stats_->calls.store(0);
  stats_->wait_seconds.store(0);
}

// ---- work handles -----------------------------------------------------------------------

bool CollectiveWork::test() {
  if (!q_->poll(ticket_)) return false;
  if (st_->error) std::rethrow_exception(st_->error);
  return true;
}

void CollectiveWork::wait() {
  if (!q_->done(ticket_)) {
    Stopwatch sw;
    q_->wait(ticket_);
    stats_->wait_seconds.fetch_add(sw.elapsed(), std::memory_order_relaxed);
  }
  if (st_->error) std::rethrow_exception(st_->error);
}

}  // namespace mt::local
