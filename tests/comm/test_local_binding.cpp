// run_local applies the core binding: each rank thread runs on its planned cores, and the
// progress threads of its communicators stay free to use every core of the process.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/local/doorbell.h"
#include "comm/local/local_job.h"
#include "comm/world.h"
#include "comm_test_util.h"
#include "core/core_binding.h"

namespace mt {
namespace {

std::vector<int> cores_of_task(int tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// The thread ids of this process whose name is `name`.
std::vector<int> tasks_named(const std::string& name) {
  std::vector<int> out;
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string n;
    std::getline(comm, n);
    if (n == name) out.push_back(std::stoi(e->d_name));
  }
  closedir(d);
  return out;
}

// Runs n ranks under `bind`; returns each rank's cores and those of the progress threads
// seen once every rank has done one all-reduce.
struct Placement {
  std::vector<std::vector<int>> rank_cores;
  std::vector<std::vector<int>> progress_cores;
};

Placement place(int n, CoreBinding bind) {
  WorldOptions o = test::test_options();
  o.bind = bind;
  Placement p;
  p.rank_cores.resize(n);
  std::mutex mu;
  run_local(n, o, [&](CommWorld& w) {
    p.rank_cores[w.rank()] = allowed_cores();
    float x = 1;
    w.world()->all_reduce(&x, &x, 1, DType::f32, ReduceOp::sum).wait();
    w.world()->barrier().wait();
    if (w.rank() == 0) {
      // A progress thread names itself once it has taken its cores.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      std::vector<int> tids;
      while ((tids = tasks_named("mt progress")).size() < size_t(n) &&
             std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard lock(mu);
      for (int t : tids) p.progress_cores.push_back(cores_of_task(t));
    }
    w.world()->barrier().wait();  // every rank's progress thread lives until rank 0 looked
  });
  return p;
}

TEST(LocalBinding, EachRankRunsOnItsPlannedCoresAndProgressThreadsRunAnywhere) {
  const std::vector<int> all = allowed_cores();
  ASSERT_FALSE(all.empty());
  // cores binds even one rank, so this checks the binding on any machine.
  const int n = all.size() >= 2 ? 2 : 1;
  const Placement p = place(n, CoreBinding::cores);
  const auto plan = plan_core_binding(all, n, 1, CoreBinding::cores);
  for (int r = 0; r < n; ++r) EXPECT_EQ(p.rank_cores[r], plan[r]) << "rank " << r;
  ASSERT_EQ(p.progress_cores.size(), size_t(n));
  for (const auto& c : p.progress_cores) EXPECT_EQ(c, all);
}

TEST(LocalBinding, NoneLeavesEveryRankOnTheProcessCores) {
  const std::vector<int> all = allowed_cores();
  const Placement p = place(2, CoreBinding::none);
  for (const auto& c : p.rank_cores) EXPECT_EQ(c, all);
}

TEST(LocalWaitPolicy, SpinsOnlyWhenEveryRankHasACore) {
  EXPECT_GT(local::wait_policy_for(2, 2).spin_polls, 0);
  EXPECT_EQ(local::wait_policy_for(2, 1).spin_polls, 0);
  EXPECT_EQ(local::wait_policy_for(8, 2).spin_polls, 0);
  EXPECT_GT(local::wait_policy_for(8, 2).yield_polls, 0);  // then a yield lets the peer run
}

// Under `taskset -c 0` two ranks share a core though the machine has more: the job counts
// the cores it may use, so its waiters do not spin on the core their peer needs.
TEST(LocalWaitPolicy, CountsTheCoresTheProcessMayUseNotTheMachines) {
  const std::vector<int> all = allowed_cores();
  ASSERT_FALSE(all.empty());
  local::WaitPolicy seen;
  std::thread t([&] {
    ASSERT_TRUE(bind_calling_thread({all[0]}));
    local::LocalJob job(2, test::test_options());
    seen = job.wait_policy();
  });
  t.join();
  EXPECT_EQ(seen.spin_polls, 0);
  EXPECT_EQ(seen.yield_polls, local::wait_policy_for(2, 1).yield_polls);
}

}  // namespace
}  // namespace mt
