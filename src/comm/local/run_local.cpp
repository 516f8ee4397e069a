// The local backend's CommWorld and run_local: n ranks as threads of this process.
#include <new>
#include <system_error>
#include <thread>

#include "comm/local/group_state.h"
#include "comm/local/local_communicator.h"
#include "comm/local/local_job.h"
#include "comm/world.h"
#include "core/core_binding.h"
#include "core/error.h"
#include "core/threads.h"

namespace mt {

namespace local {

class LocalWorld final : public CommWorld {
 public:
  LocalWorld(LocalJob& job, int rank) : job_(job), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return job_.size(); }
  const char* backend_name() const override { return "local"; }
  const WorldOptions& options() const override { return job_.options(); }

  std::shared_ptr<Communicator> world() override {
    if (!world_) world_ = std::make_shared<LocalCommunicator>(job_.world_group(), rank_);
    return world_;
  }

  std::shared_ptr<Communicator> make_group(const std::vector<int>& members,
                                           const std::string& kind) override {
    return std::make_shared<LocalCommunicator>(
        job_.join_group(rank_, group_calls_++, members, kind), rank_);
  }

  void abort(const std::string& why) override {
    job_.fail(rank_, std::make_exception_ptr(RuntimeError(str("rank ", rank_, ": ", why))));
  }

 private:
  LocalJob& job_;
  int rank_;
  uint64_t group_calls_ = 0;
  std::shared_ptr<Communicator> world_;
};

// The failure as the caller of run_local sees it: it names the rank unless it already
// does; a UsageError keeps its type (exit code 2) and its plain message.
[[noreturn]] void rethrow_root_cause(const LocalJob& job) {
  const std::string prefix = str("rank ", job.failed_rank(), ": ");
  try {
    std::rethrow_exception(job.failure());
  } catch (const UsageError&) {
    throw;
  } catch (const std::bad_alloc&) {
    // An allocation without a size (a std::vector, a library); Arena says how much.
    throw RuntimeError(prefix + "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (what.rfind("rank ", 0) == 0 && dynamic_cast<const RuntimeError*>(&e)) throw;
    throw RuntimeError(prefix + what);
  } catch (...) {
    throw RuntimeError(prefix + "unknown exception");
  }
}

}  // namespace local

void run_local(int n, const WorldOptions& opts, const RankMain& fn) {
  MT_REQUIRE(n >= 1, "the local backend needs at least 1 rank (got ", n, ")");
  const std::vector<int> allowed = allowed_cores();
  // Refused here (--bind cores that does not fit), before any rank starts.
  const std::vector<std::vector<int>> cores =
      plan_core_binding(allowed, n, opts.threads_per_rank, opts.bind);
  local::LocalJob job(n, opts);
  if (!cores.empty()) job.set_progress_cores(allowed);
  std::vector<std::thread> ranks;
  ranks.reserve(n);
  for (int r = 0; r < n && !job.failed(); ++r) {
    try {
      ranks.emplace_back([&job, &fn, &cores, r] {
        name_calling_thread(str("mt rank ", r));
        // Before the rank's first OpenMP region, so that its team inherits the cores.
        if (!cores.empty()) bind_calling_thread(cores[r]);
        try {
          local::LocalWorld world(job, r);
          fn(world);
        } catch (...) {
          job.fail(r, std::current_exception(), local::LocalJob::FailKind::rank_exit);
        }
      });
    } catch (const std::system_error& e) {
      // The started ranks are stopped and joined: a std::thread destroyed unjoined would end
      // the process (SIGABRT) and leave the lock of --save behind.
      job.fail(r, std::make_exception_ptr(
                      RuntimeError(thread_start_failure(str("rank ", r, " (of ", n, ")"), e))));
    }
  }
  for (auto& t : ranks) t.join();
  if (job.failed()) local::rethrow_root_cause(job);
}

}  // namespace mt
