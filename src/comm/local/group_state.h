// What the members of one local group share: per-member phase counters, the descriptor of
// each member's current collective, a doorbell, and the point-to-point mailbox.
//
// Collectives are phase-synchronised. A member executing collective #seq "arrives" at
// phase p by storing seq*kPhasesPerOp + p into its counter, and waits for phase p until
// every member's counter has reached that value. Counters only grow, and every member runs
// its collectives on a group in the same order, so the counters double as the sequence
// numbers reported on timeouts ("rank 1 did not arrive").
//
// A descriptor is written before phase 1 and read by peers until they arrive at phase 1 of
// the next collective, so two slots (seq % 2) let a fast member publish #seq+1 while a slow
// one still reads #seq.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/local/doorbell.h"

namespace mt::local {

class LocalJob;

enum class OpCode : uint8_t {
  barrier,
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  all_to_all_v
};
const char* op_name(OpCode op);

// One member's arguments to one collective; peers read the buffers through it directly.
struct CollDesc {
  OpCode op = OpCode::barrier;
  DType dtype = DType::u8;
  ReduceOp reduce = ReduceOp::sum;
  int root = 0;
  size_t count = 0;  // all_reduce: count; reduce_scatter: recv_count; all_gather: send_count
  const void* send = nullptr;
  void* recv = nullptr;
  const size_t* send_counts = nullptr;  // all_to_all_v
  const size_t* recv_counts = nullptr;
};

constexpr uint64_t kPhasesPerOp = 4;

struct alignas(64) PhaseCounter {
  std::atomic<uint64_t> value{0};
};

// One point-to-point message or receive request, waiting for its match.
struct P2POp {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::u8;
  std::atomic<int> status{0};  // 0 pending, 1 done, 2 failed (see error)
  std::string error;           // written before status becomes 2
};

struct Mailbox {
  struct Channel {
    std::deque<std::shared_ptr<P2POp>> sends, recvs;  // unmatched, in issue order
  };
  std::mutex mu;
  std::map<std::tuple<int, int, int>, Channel> channels;  // (src, dst, tag), group indices
};

// A member's request line: a peer about to sleep on this member's share of a collective
// asks the member's progress thread to advance its queue (op_queue.h). Never rung per call.
struct ProgressLine {
  void request() {
    {
      std::lock_guard lock(mu);
      ++requests;
    }
    cv.notify_one();
  }
  std::mutex mu;
  std::condition_variable cv;
  uint64_t requests = 0;  // under mu
  bool stopping = false;  // under mu: the member's communicator is closing
};

struct GroupState {
  GroupState(LocalJob& job, std::vector<int> members, std::string name);

  LocalJob& job;
  const std::vector<int> members;  // global ranks, ascending
  const std::string name;          // e.g. "dp[1,3]"
  std::unique_ptr<PhaseCounter[]> arrived;
  std::vector<std::array<CollDesc, 2>> desc;  // [member][seq % 2]
  Doorbell bell;
  std::unique_ptr<ProgressLine[]> lines;  // [member]
  Mailbox mailbox;
};

}  // namespace mt::local
