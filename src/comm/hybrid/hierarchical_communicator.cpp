#include "comm/hybrid/hierarchical_communicator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/hybrid/direct_all_to_all.h"
#include "comm/hybrid/sleeping_wait.h"
#include "comm/hybrid/slot_tag.h"
#include "core/core_binding.h"
#include "core/error.h"
#include "core/timer.h"

namespace mt::hybrid {

namespace {

// One collective: its steps run on the worker; the caller waits on done.
struct Task {
  std::function<void()> body;
  const char* what = "";  // the collective, for the recorded spans
  double queued_at = 0;   // when the rank issued it (recorded runs only)
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

char* bytes(void* p) {
  return static_cast<char*>(p);
}
const char* bytes(const void* p) {
  return static_cast<const char*>(p);
}

void copy(void* dst, const void* src, size_t n) {
  if (n) std::memcpy(dst, src, n);
}

void divide(void* buf, size_t count, int n) {
  float* p = static_cast<float*>(buf);
  const float d = static_cast<float>(n);
  for (size_t i = 0; i < count; ++i) p[i] /= d;
}

void require_buffer(const void* p, size_t count, const char* what, const std::string& group) {
  MT_CHECK(p != nullptr || count == 0, what, " buffer on group ", group, " is null but count is ",
           count);
}

}  // namespace

struct HierarchicalCommunicator::State {
  explicit State(HierarchicalParts p) : parts(std::move(p)) { pacing.timeout_s = parts.timeout_s; }

  HierarchicalParts parts;
  SleepingWait pacing;  // how the worker waits for a step between processes
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Task>> queue;
  bool stop = false;
  bool finished = false;  // run() returned
  std::thread worker;

  // Worker-only: the first failure (later collectives fail with it rather than run out of
  // step with the peers) and the staging buffer, grown to the largest call.
  std::exception_ptr broken;
  std::vector<char> staging;

  std::atomic<uint64_t> seq{0}, calls{0}, wait_ns{0};
  WorkerSpans spans;  // --trace

  char* scratch(size_t n) {
    if (staging.size() < n) staging.resize(n);
    return staging.data();
  }

  void run() {
    for (;;) {
      std::shared_ptr<Task> t;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) {
          finished = true;
          cv.notify_all();
          return;
        }
        t = std::move(queue.front());
        queue.pop_front();
      }
      std::exception_ptr err = broken;
      const double begin = spans.recording() ? now_seconds() : 0;
      if (!err) {
        try {
          t->body();
        } catch (...) {
          err = broken = std::current_exception();
        }
      }
      if (t->queued_at > 0) spans.record(std::string("queued: ") + t->what, t->queued_at, begin);
      if (t->queued_at > 0) spans.record(t->what, begin, now_seconds());
      {
        std::lock_guard lock(t->mu);
        t->done = true;
        t->error = err;
      }
      t->cv.notify_all();
    }
  }
};

namespace {

class HierWork final : public Work::Impl {
 public:
  HierWork(std::shared_ptr<Task> t, std::shared_ptr<HierarchicalCommunicator::State> s)
      : task_(std::move(t)), state_(std::move(s)) {}

  bool test() override {
    std::lock_guard lock(task_->mu);
    if (!task_->done) return false;
    if (task_->error) std::rethrow_exception(task_->error);
    return true;
  }

  // Unbounded here: every step of the task waits with the group's timeout (and a failed
  // rank of this process wakes the intra-process steps at once).
  void wait() override {
    Stopwatch watch;
    std::unique_lock lock(task_->mu);
    task_->cv.wait(lock, [&] { return task_->done; });
    state_->wait_ns += static_cast<uint64_t>(watch.elapsed() * 1e9);
    if (task_->error) std::rethrow_exception(task_->error);
  }

 private:
  std::shared_ptr<Task> task_;
  std::shared_ptr<HierarchicalCommunicator::State> state_;
};

Work enqueue(const std::shared_ptr<HierarchicalCommunicator::State>& s, const char* what,
             std::function<void()> body) {
  auto t = std::make_shared<Task>();
  t->body = std::move(body);
  t->what = what;
  if (s->spans.recording()) t->queued_at = now_seconds();
  s->seq++;
  s->calls++;
  {
    std::lock_guard lock(s->mu);
    s->queue.push_back(t);
  }
  s->cv.notify_one();
  return Work(std::make_shared<HierWork>(std::move(t), s));
}

}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(HierarchicalParts parts)
    : state_(std::make_shared<State>(std::move(parts))) {
  const HierarchicalParts& q = state_->parts;
  MT_CHECK(q.processes >= 2 && q.per_process >= 2 &&
               static_cast<int>(q.members.size()) == q.processes * q.per_process && q.intra &&
               q.inter && static_cast<int>(q.p2p.size()) == q.per_process,
           "hierarchical group ", q.name, " is not P >= 2 processes x L >= 2 members");
  auto s = state_;
  s->worker = std::thread([s] {
    // Named for its group, so per-thread CPU (top -H, /proc/<pid>/task/*/comm) tells it
    // from the rank that created it.
    name_calling_thread("mt w " + s->parts.name);
    s->run();
  });
}

// The worker drains what was issued, then ends. While an exception unwinds this rank the
// worker may sit in an MPI wait that only the job's abort ends (MPI cannot cancel a started
// collective): after a short grace it is left to that abort instead of blocking the
// unwinding (intra-process steps fail fast once the rank's failure is recorded).
HierarchicalCommunicator::~HierarchicalCommunicator() {
  std::unique_lock lock(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  const bool unwinding = std::uncaught_exceptions() > 0;
  const bool done = unwinding ? state_->cv.wait_for(lock, std::chrono::seconds(2),
                                                    [&] { return state_->finished; })
                              : true;
  lock.unlock();
  if (done)
    state_->worker.join();
  else
    state_->worker.detach();
}

int HierarchicalCommunicator::rank() const {
  const HierarchicalParts& q = state_->parts;
  return q.process_index * q.per_process + q.local_index;
}
int HierarchicalCommunicator::size() const {
  return static_cast<int>(state_->parts.members.size());
}
int HierarchicalCommunicator::global_rank(int i) const {
  MT_CHECK(i >= 0 && i < size(), "member ", i, " of group ", name());
  return state_->parts.members[static_cast<size_t>(i)];
}
const std::string& HierarchicalCommunicator::name() const {
  return state_->parts.name;
}

Work HierarchicalCommunicator::all_reduce(const void* send, void* recv, size_t count, DType t,
                                          ReduceOp op) {
  require_buffer(send, count, "all_reduce send", name());
  require_buffer(recv, count, "all_reduce recv", name());
  MT_CHECK(op != ReduceOp::avg || t == DType::f32, "all_reduce avg needs f32, got ", dtype_name(t));
  State* s = state_.get();
  const int n = size();
  return enqueue(state_, "all_reduce", [s, send, recv, count, t, op, n] {
    const HierarchicalParts& q = s->parts;
    const size_t es = dtype_size(t), L = q.per_process, j = q.local_index;
    const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
    const size_t m = (count + L - 1) / L;  // this slot's share
    // In place on recv when the count divides; else a copy padded to L*m (the padding is
    // reduced with itself and dropped).
    char* buf = bytes(recv);
    if (m * L == count) {
      if (send != recv) copy(recv, send, count * es);
    } else {
      buf = s->scratch(m * L * es);
      copy(buf, send, count * es);
      std::memset(buf + count * es, 0, (m * L - count) * es);
    }
    char* mine = buf + j * m * es;
    q.intra->reduce_scatter(buf, mine, m, t, inner).wait();
    wait_sleeping(q.inter->all_reduce(mine, mine, m, t, inner), s->pacing);
    q.intra->all_gather(mine, buf, m, t).wait();
    if (buf != recv) copy(recv, buf, count * es);
    if (op == ReduceOp::avg) divide(recv, count, n);
  });
}

Work HierarchicalCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                              DType t, ReduceOp op) {
  require_buffer(send, recv_count, "reduce_scatter send", name());
  require_buffer(recv, recv_count, "reduce_scatter recv", name());
  MT_CHECK(op != ReduceOp::avg || t == DType::f32, "reduce_scatter avg needs f32, got ",
           dtype_name(t));
  State* s = state_.get();
  const int n = size();
  return enqueue(state_, "reduce_scatter", [s, send, recv, recv_count, t, op, n] {
    const HierarchicalParts& q = s->parts;
    const size_t P = q.processes, L = q.per_process, j = q.local_index;
    const size_t chunk = recv_count * dtype_size(t);
    const ReduceOp inner = op == ReduceOp::avg ? ReduceOp::sum : op;
    // Regroup by local index: block k holds the chunks of ranks (0,k), (1,k), ..., (P-1,k),
    // so the intra reduce-scatter hands slot j exactly the chunks its inter step scatters.
    char* staged = s->scratch(P * L * chunk);
    for (size_t p = 0; p < P; ++p)
      for (size_t k = 0; k < L; ++k)
        copy(staged + (k * P + p) * chunk, bytes(send) + (p * L + k) * chunk, chunk);
    char* mine = staged + j * P * chunk;
    q.intra->reduce_scatter(staged, mine, P * recv_count, t, inner).wait();
    wait_sleeping(q.inter->reduce_scatter(mine, recv, recv_count, t, inner), s->pacing);
    if (op == ReduceOp::avg) divide(recv, recv_count, n);
  });
}

Work HierarchicalCommunicator::all_gather(const void* send, void* recv, size_t send_count,
                                          DType t) {
  require_buffer(send, send_count, "all_gather send", name());
  require_buffer(recv, send_count, "all_gather recv", name());
  State* s = state_.get();
  return enqueue(state_, "all_gather", [s, send, recv, send_count, t] {
    const HierarchicalParts& q = s->parts;
    const size_t P = q.processes, L = q.per_process, j = q.local_index;
    const size_t chunk = send_count * dtype_size(t);
    // Block k of staged: the chunks of ranks (0,k) .. (P-1,k); slot j gathers its own block
    // across processes, then the blocks are gathered inside the process.
    char* staged = s->scratch(P * L * chunk);
    char* mine = staged + j * P * chunk;
    wait_sleeping(q.inter->all_gather(send, mine, send_count, t), s->pacing);
    q.intra->all_gather(mine, staged, P * send_count, t).wait();
    for (size_t p = 0; p < P; ++p)
      for (size_t k = 0; k < L; ++k)
        copy(bytes(recv) + (p * L + k) * chunk, staged + (k * P + p) * chunk, chunk);
  });
}

Work HierarchicalCommunicator::broadcast(void* buf, size_t count, DType t, int root) {
  MT_CHECK(root >= 0 && root < size(), "broadcast root ", root, " on group ", name());
  require_buffer(buf, count, "broadcast", name());
  State* s = state_.get();
  return enqueue(state_, "broadcast", [s, buf, count, t, root] {
    const HierarchicalParts& q = s->parts;
    const int root_process = root / q.per_process, root_slot = root % q.per_process;
    if (q.local_index == root_slot)
      wait_sleeping(q.inter->broadcast(buf, count, t, root_process), s->pacing);
    q.intra->broadcast(buf, count, t, root_slot).wait();
  });
}

Work HierarchicalCommunicator::barrier() {
  State* s = state_.get();
  return enqueue(state_, "barrier", [s] {
    const HierarchicalParts& q = s->parts;
    // Everyone here has arrived -> every process has -> release everyone here.
    q.intra->barrier().wait();
    if (q.local_index == 0) wait_sleeping(q.inter->barrier(), s->pacing);
    q.intra->barrier().wait();
  });
}

Work HierarchicalCommunicator::all_to_all_v(const void* send, const size_t* send_counts, void* recv,
                                            const size_t* recv_counts, DType t) {
  const size_t N = static_cast<size_t>(size());
  // The counts are read on the worker, after this call returns: copy them.
  std::vector<size_t> sc(send_counts, send_counts + N), rc(recv_counts, recv_counts + N);
  size_t s_total = 0, r_total = 0;
  for (size_t g = 0; g < N; ++g) {
    s_total += sc[g];
    r_total += rc[g];
  }
  require_buffer(send, s_total, "all_to_all_v send", name());
  require_buffer(recv, r_total, "all_to_all_v recv", name());
  State* s = state_.get();
  return enqueue(
      state_, "all_to_all_v", [s, send, recv, t, sc = std::move(sc), rc = std::move(rc)] {
        const double begin = s->spans.recording() ? now_seconds() : 0;
        direct_all_to_all_v(s->parts, send, sc.data(), recv, rc.data(), t, s->staging, s->pacing);
        s->spans.record("all_to_all_v between processes", begin, now_seconds());
      });
}

Work HierarchicalCommunicator::send(const void* buf, size_t count, DType t, int peer, int tag) {
  MT_CHECK(peer >= 0 && peer < size(), "send to rank ", peer, " on group ", name());
  const HierarchicalParts& q = state_->parts;
  state_->calls++;
  const int p = peer / q.per_process, k = peer % q.per_process;
  if (p == q.process_index) return q.intra->send(buf, count, t, k, tag);
  return q.p2p[static_cast<size_t>(k)]->send(buf, count, t, p,
                                             caller_slot_tag(q.local_index, tag, q.name));
}

Work HierarchicalCommunicator::recv(void* buf, size_t count, DType t, int peer, int tag) {
  MT_CHECK(peer >= 0 && peer < size(), "recv from rank ", peer, " on group ", name());
  const HierarchicalParts& q = state_->parts;
  state_->calls++;
  const int p = peer / q.per_process, k = peer % q.per_process;
  if (p == q.process_index) return q.intra->recv(buf, count, t, k, tag);
  return q.p2p[static_cast<size_t>(q.local_index)]->recv(buf, count, t, p,
                                                         caller_slot_tag(k, tag, q.name));
}

// Bytes are what the parts moved (intra copies included, as the local backend counts
// them); wait time is what callers spent blocked on this communicator's Works.
CommStats HierarchicalCommunicator::stats() const {
  const HierarchicalParts& q = state_->parts;
  CommStats s;
  s.calls = state_->calls.load();
  s.wait_seconds = static_cast<double>(state_->wait_ns.load()) * 1e-9;
  s.bytes_sent = q.intra->stats().bytes_sent + q.inter->stats().bytes_sent;
  for (const auto& c : q.p2p) {
    const CommStats p = c->stats();
    s.bytes_sent += p.bytes_sent;
    s.wait_seconds += p.wait_seconds;
  }
  return s;
}

void HierarchicalCommunicator::reset_stats() {
  const HierarchicalParts& q = state_->parts;
  state_->calls = 0;
  state_->wait_ns = 0;
  q.intra->reset_stats();
  q.inter->reset_stats();
  for (const auto& c : q.p2p) c->reset_stats();
}

void HierarchicalCommunicator::set_recording(bool on) {
  state_->spans.set_recording(on);
}
std::vector<WorkerSpan> HierarchicalCommunicator::take_spans() {
  return state_->spans.take();
}

}  // namespace mt::hybrid
