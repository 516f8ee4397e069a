// comm/hybrid/direct_all_to_all.h: a hierarchical group's all-to-all-v exchanges every
// member's rows directly with every other member. Pinned on fake communicators that log
// every call (no MPI): this member's sends to other processes are posted first, before
// anything inside the process and before any wait, and nothing is a collective, so no
// rendezvous with the process's other members comes before its rows leave (the two-level
// all-to-all began with an all-gather inside the process). The receives land in rank order.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/hybrid/direct_all_to_all.h"
#include "comm/hybrid/slot_tag.h"
#include "core/error.h"

namespace mt::hybrid {
namespace {

using Log = std::vector<std::string>;

struct LoggedWork final : Work::Impl {
  LoggedWork(Log& l, std::string w) : log(l), what(std::move(w)) {}
  bool test() override {
    if (!done) log.push_back("done " + what);
    done = true;
    return true;
  }
  void wait() override { test(); }
  Log& log;
  std::string what;
  bool done = false;
};

// A receive fills its buffer with `fill(peer, tag)`: the sender as the test knows it.
class FakeComm final : public Communicator {
 public:
  FakeComm(Log& log, std::string name, int processes_or_members, int me,
           std::function<float(int, int)> fill)
      : log_(log), name_(std::move(name)), n_(processes_or_members), me_(me), fill_(fill) {}
  int rank() const override { return me_; }
  int size() const override { return n_; }
  int global_rank(int i) const override { return i; }
  const std::string& name() const override { return name_; }
  Work all_reduce(const void*, void*, size_t, DType, ReduceOp) override {
    return call("all_reduce");
  }
  Work reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override {
    return call("reduce_scatter");
  }
  Work all_gather(const void*, void*, size_t, DType) override { return call("all_gather"); }
  Work broadcast(void*, size_t, DType, int) override { return call("broadcast"); }
  Work all_to_all_v(const void*, const size_t*, void*, const size_t*, DType) override {
    return call("all_to_all_v");
  }
  Work send(const void*, size_t count, DType, int peer, int tag) override {
    return call(str("send ", count, " to ", peer, " tag ", tag));
  }
  Work recv(void* buf, size_t count, DType, int peer, int tag) override {
    for (size_t i = 0; i < count; ++i) static_cast<float*>(buf)[i] = fill_(peer, tag);
    return call(str("recv ", count, " from ", peer, " tag ", tag));
  }
  Work barrier() override { return call("barrier"); }
  CommStats stats() const override { return {}; }
  void reset_stats() override {}

 private:
  Work call(const std::string& what) {
    log_.push_back(name_ + " " + what);
    return Work(std::make_shared<LoggedWork>(log_, name_ + " " + what));
  }
  Log& log_;
  std::string name_;
  int n_, me_;
  std::function<float(int, int)> fill_;
};

// Group rank 0 of 2 processes x 2 members: (process 0, slot 0). Group rank g's rows are
// worth float(g) to the receiver.
HierarchicalParts member_0(Log& log) {
  HierarchicalParts q;
  q.members = {0, 1, 2, 3};
  q.name = "ep[0..3]";
  q.processes = 2, q.per_process = 2, q.process_index = 0, q.local_index = 0;
  const auto across = [](int p, int tag) { return float(p * 2 + int(tag / kSlotTagStride)); };
  q.intra = std::make_shared<FakeComm>(log, "intra", 2, 0, [](int k, int) { return float(k); });
  q.inter = std::make_shared<FakeComm>(log, "inter", 2, 0, across);
  for (int k = 0; k < 2; ++k)
    q.p2p.push_back(std::make_shared<FakeComm>(log, str("p2p", k), 2, 0, across));
  return q;
}

TEST(DirectAllToAll, RowsToOtherProcessesLeaveBeforeAnythingInsideTheProcess) {
  Log log;
  const HierarchicalParts q = member_0(log);
  const std::vector<size_t> sc = {1, 2, 3, 4}, rc = {1, 5, 6, 7};
  std::vector<float> send(10, -1.0f), recv(19, -2.0f);
  std::vector<char> scratch;
  SleepingWait pacing;
  pacing.sleep = [](std::chrono::microseconds) {};
  direct_all_to_all_v(q, send.data(), sc.data(), recv.data(), rc.data(), DType::f32, scratch,
                      pacing);
  const int tag0 = slot_tag(0, kAllToAllTag, q.name), tag1 = slot_tag(1, kAllToAllTag, q.name);
  const Log posts = {
      str("p2p0 send 3 to 1 tag ", tag0),    // to (1, 0): slot 0's communicator
      str("p2p1 send 4 to 1 tag ", tag0),    // to (1, 1)
      str("p2p0 recv 6 from 1 tag ", tag0),  // from (1, 0), on this slot's communicator
      str("p2p0 recv 7 from 1 tag ", tag1),  // from (1, 1)
      str("intra send 2 to 1 tag ", kAllToAllTag), str("intra recv 5 from 1 tag ", kAllToAllTag),
  };
  ASSERT_GE(log.size(), posts.size());
  EXPECT_EQ(Log(log.begin(), log.begin() + long(posts.size())), posts);
  for (const std::string& line : log) {
    EXPECT_EQ(line.find("all_gather"), std::string::npos) << line;
    EXPECT_EQ(line.find("all_to_all_v"), std::string::npos) << line;
  }
  EXPECT_EQ(log.size(), 2 * posts.size());  // and each completed
  // Rank order: own row (copied), then ranks 1, 2, 3.
  std::vector<float> want = {-1.0f};
  for (int g = 1; g < 4; ++g) want.insert(want.end(), rc[size_t(g)], float(g));
  EXPECT_EQ(recv, want);
}

TEST(DirectAllToAll, InPlaceRowsAreSentFromACopy) {
  Log log;
  const HierarchicalParts q = member_0(log);
  const std::vector<size_t> sc = {2, 1, 1, 1}, rc = {2, 1, 1, 1};
  std::vector<float> buf = {7, 8, 9, 9, 9};
  std::vector<char> scratch;
  SleepingWait pacing;
  direct_all_to_all_v(q, buf.data(), sc.data(), buf.data(), rc.data(), DType::f32, scratch, pacing);
  EXPECT_EQ(buf, (std::vector<float>{7, 8, 1, 2, 3}));
  EXPECT_GE(scratch.size(), 5 * sizeof(float));
}

TEST(DirectAllToAll, ACallersTagCannotBeTheAllToAlls) {
  EXPECT_THROW(caller_slot_tag(0, kAllToAllTag, "ep[0..3]"), std::exception);
  EXPECT_EQ(caller_slot_tag(1, 5, "ep[0..3]"), int(kSlotTagStride) + 5);
}

}  // namespace
}  // namespace mt::hybrid
