// The Communicator: one per process group (world, dp, tp, pp, ep), one object per rank.
//
// Every call is asynchronous and returns a Work handle. Calls on one communicator complete
// in the order they were issued; calls on different communicators never block each other
// (a rank may sit in a tp all-reduce while its pp receive is pending). Buffers passed to a
// call must stay alive and untouched until its Work completes.
//
// Sizes are validated on entry. Every collective gets a per-communicator sequence number;
// a wait that exceeds the group's timeout throws RuntimeError naming the op, the group, the
// sequence number and the ranks that did not arrive, e.g.
//   rank 3: all_reduce #118 on group dp[1,3]: rank 1 did not arrive within 30 s
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mt {

enum class DType : uint8_t { f32, i32, i64, u8 };
enum class ReduceOp : uint8_t { sum, avg, max, min };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* reduce_op_name(ReduceOp op);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::u8;
}

// Completion handle of one asynchronous call. A default-constructed Work is complete.
class Work {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual bool test() = 0;  // non-blocking; true once complete (rethrows a failure)
    virtual void wait() = 0;  // blocks until complete; throws RuntimeError on failure/timeout
    // wait() after the caller already waited waited_s on this work by other means (polling
    // test()): that time counts against the timeout, and a timeout message says the whole.
    virtual void wait_after(double waited_s) {
      (void)waited_s;
      wait();
    }
  };
  Work() = default;
  explicit Work(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  bool test() { return !impl_ || impl_->test(); }
  void wait() {
    if (impl_) impl_->wait();
  }
  void wait_after(double waited_s) {
    if (impl_) impl_->wait_after(waited_s);
  }

 private:
  std::shared_ptr<Impl> impl_;
};

// Traffic counters of one communicator, as seen by this rank.
struct CommStats {
  uint64_t bytes_sent = 0;  // bytes this rank moved to peers (algorithm-level, not payload)
  uint64_t calls = 0;
  double wait_seconds = 0;  // time spent blocked inside Work::wait()
};

// A scope in which the calling thread waits on each call at once (the tensor-parallel
// regions: `comm->all_reduce(...).wait()`). A hint for a backend that would otherwise hand
// each call to a background thread. The local backend no longer wakes a thread per call
// at all (comm/local/op_queue.h), so there it changes nothing. Nests; per thread.
class WaitedAtOnce {
 public:
  WaitedAtOnce() : outer_(active_) { active_ = true; }
  ~WaitedAtOnce() { active_ = outer_; }
  WaitedAtOnce(const WaitedAtOnce&) = delete;
  WaitedAtOnce& operator=(const WaitedAtOnce&) = delete;
  static bool active() { return active_; }

 private:
  bool outer_;
  static thread_local bool active_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // index within this group
  virtual int size() const = 0;
  // Global (world) rank of group member i.
  virtual int global_rank(int i) const = 0;
  // Human-readable group name with its members, e.g. "dp[1,3]".
  virtual const std::string& name() const = 0;

  // recv may equal send (in place). avg divides by size() (floats only).
  virtual Work all_reduce(const void* send, void* recv, size_t count, DType t, ReduceOp op) = 0;
  // send holds size()*recv_count elements; rank i receives reduced chunk i.
  virtual Work reduce_scatter(const void* send, void* recv, size_t recv_count, DType t,
                              ReduceOp op) = 0;
  // recv gets size()*send_count elements, chunk i from rank i. send may alias recv chunk rank().
  virtual Work all_gather(const void* send, void* recv, size_t send_count, DType t) = 0;
  virtual Work broadcast(void* buf, size_t count, DType t, int root) = 0;
  // send_counts[i] elements go to rank i (packed in rank order in send); recv_counts[i]
  // come from rank i (packed in rank order in recv). Counts vectors have size() entries
  // and must agree pairwise across ranks.
  virtual Work all_to_all_v(const void* send, const size_t* send_counts, void* recv,
                            const size_t* recv_counts, DType t) = 0;
  // Point-to-point within the group. Messages between one pair with one tag arrive in order;
  // different tags never match each other (see make_p2p_tag).
  virtual Work send(const void* buf, size_t count, DType t, int peer, int tag) = 0;
  virtual Work recv(void* buf, size_t count, DType t, int peer, int tag) = 0;
  virtual Work barrier() = 0;

  virtual CommStats stats() const = 0;
  virtual void reset_stats() = 0;

  // Typed conveniences.
  template <typename T>
  Work all_reduce(std::span<T> buf, ReduceOp op) {
    return all_reduce(buf.data(), buf.data(), buf.size(), dtype_of<T>(), op);
  }
  template <typename T>
  Work broadcast(std::span<T> buf, int root) {
    return broadcast(buf.data(), buf.size(), dtype_of<T>(), root);
  }
};

// Point-to-point tag from (kind, chunk, microbatch) so two messages between the same pair
// of ranks can never be confused (pp=2: the previous and next stage are the same rank).
enum class P2PKind : uint8_t { activation = 1, gradient = 2, header = 3, user = 4 };
int make_p2p_tag(P2PKind kind, int chunk, int microbatch);

// Group name used in messages: kind and member global ranks, runs of three or more
// consecutive ranks shortened ("dp[1,3]", "world[0..7]", "tp[4..7]").
std::string group_name(const std::string& kind, const std::vector<int>& members);

}  // namespace mt
