#include "comm/bench_comm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iomanip>
#include <iterator>
#include <ostream>
#include <vector>

#include "comm/hybrid/run_hybrid.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/system_memory.h"
#include "core/timer.h"

namespace mt {

namespace {

constexpr const char* kOpNames[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                                    "broadcast"};

// nccl-tests' bus-bandwidth factors: the busiest link carries busbw*time bytes.
double bus_factor(BenchOp op, int n) {
  if (op == BenchOp::all_reduce) return 2.0 * (n - 1) / n;
  if (op == BenchOp::broadcast) return 1.0;
  return double(n - 1) / n;  // reduce_scatter, all_gather, all_to_all
}

struct Row {
  size_t bytes, count;
  double seconds;
  bool ok;
};

// One size: buffers sized so `bytes` is the per-rank payload nccl-tests reports
// (all_reduce/broadcast/all_to_all: the buffer; reduce_scatter: the input; all_gather: the
// output). Returns the median over repeats of the slowest rank's time per call.
Row bench_size(Communicator& c, const CommBenchOptions& o, size_t bytes) {
  const int n = c.size(), me = c.rank();
  const size_t total = std::max<size_t>(bytes / sizeof(float), 1);
  const size_t block = std::max<size_t>(total / n, 1);
  const bool blocked =
      o.op == BenchOp::reduce_scatter || o.op == BenchOp::all_gather || o.op == BenchOp::all_to_all;
  const size_t count = blocked ? block * n : total;
  std::vector<float> a(count), b(count);
  std::vector<size_t> counts(n, block);
  auto fill = [&] {
    for (size_t i = 0; i < count; ++i) a[i] = float((me + 1) * ((i % 13) + 1));
  };
  auto call = [&]() -> Work {
    float* out = o.in_place ? a.data() : b.data();
    switch (o.op) {
      case BenchOp::all_reduce:
        return c.all_reduce(a.data(), out, count, DType::f32, ReduceOp::sum);
      case BenchOp::reduce_scatter:
        return c.reduce_scatter(a.data(), o.in_place ? a.data() + me * block : b.data(), block,
                                DType::f32, ReduceOp::sum);
      case BenchOp::all_gather:
        return c.all_gather(a.data() + me * block, out, block, DType::f32);
      case BenchOp::all_to_all:
        return c.all_to_all_v(a.data(), counts.data(), b.data(), counts.data(), DType::f32);
      case BenchOp::broadcast:
        break;
    }
    return c.broadcast(a.data(), count, DType::f32, 0);
  };

  bool ok = true;
  if (o.check) {
    fill();
    call().wait();
    const float* res = o.in_place && o.op != BenchOp::all_to_all ? a.data() : b.data();
    if (o.in_place && o.op == BenchOp::reduce_scatter) res = a.data() + me * block;
    // Spot-check a few elements against the closed form of the fill above.
    for (size_t i : {size_t(0), count / 3, count - 1}) {
      const float base = float((i % 13) + 1);
      float want = 0;
      if (o.op == BenchOp::all_reduce) want = base * n * (n + 1) / 2;
      if (o.op == BenchOp::broadcast) want = base;
      if (o.op == BenchOp::all_gather) want = base * float(i / block + 1);  // rank i/block's
      if (o.op == BenchOp::reduce_scatter) {
        if (i >= block) continue;
        want = float(((me * block + i) % 13) + 1) * n * (n + 1) / 2;
      }
      if (o.op == BenchOp::all_to_all)
        want = float(i / block + 1) * float(((me * block + i % block) % 13) + 1);
      if (res[i] != want) ok = false;
    }
  }
  for (int i = 0; i < o.warmup; ++i) call().wait();
  std::vector<double> times;
  for (int r = 0; r < o.repeats; ++r) {
    c.barrier().wait();
    Stopwatch sw;
    for (int i = 0; i < o.iters; ++i) call().wait();
    // The slowest rank defines the time of a collective.
    int64_t ns = int64_t(sw.elapsed() / o.iters * 1e9);
    c.all_reduce(&ns, &ns, 1, DType::i64, ReduceOp::max).wait();
    times.push_back(ns * 1e-9);
  }
  std::sort(times.begin(), times.end());
  int32_t good = ok ? 1 : 0;
  c.all_reduce(&good, &good, 1, DType::i32, ReduceOp::min).wait();
  return {count * sizeof(float), count, times[times.size() / 2], good == 1};
}

double memcpy_seconds(size_t bytes, int iters) {
  std::vector<char> src(bytes, 1), dst(bytes);
  std::memcpy(dst.data(), src.data(), bytes);  // fault the pages in
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) {
    Stopwatch sw;
    for (int i = 0; i < iters; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    t.push_back(sw.elapsed() / iters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

const char* bench_op_name(BenchOp op) {
  return kOpNames[int(op)];
}

BenchOp bench_op_of(const std::string& text) {
  for (size_t i = 0; i < std::size(kOpNames); ++i)
    if (text == kOpNames[i]) return BenchOp(i);
  throw UsageError(
      str("--op must be all_reduce, reduce_scatter, all_gather, all_to_all or "
          "broadcast (got '",
          text, "')"));
}

Backend bench_backend_of(const std::string& text) {
  for (const auto& [name, b] : backend_names())
    if (text == name) return b;
  throw UsageError("--backend must be local or mpi");
}

int run_comm_bench(const CommBenchOptions& o, int* argc, char*** argv, std::ostream& out) {
  MT_REQUIRE(o.min_bytes >= 4 && o.min_bytes <= o.max_bytes,
             "need 4 <= --min-bytes <= --max-bytes");
  MT_REQUIRE(o.backend != Backend::local || (o.ranks >= 1 && o.ranks <= kMaxLocalRanks),
             "--ranks must be in 1..", kMaxLocalRanks, " on the local backend (got ", o.ranks, ")");
  // Each rank holds two buffers of the largest size; refuse what this process cannot hold
  // (a --max-bytes of -1 read as 2^64 - 1 used to double its way into the OOM killer).
  const int ranks_here = o.backend == Backend::local ? o.ranks : o.ranks_per_process;
  const int64_t available = available_memory_bytes();
  const double needed = 2.0 * double(o.max_bytes) * ranks_here;
  MT_REQUIRE(o.max_bytes <= (size_t(1) << 50) && (available < 0 || needed <= double(available)),
             "--max-bytes ", o.max_bytes, " needs ", int64_t(needed / double(1 << 20)), " MiB for ",
             ranks_here, " rank(s) here (two buffers each), more than ",
             available < 0
                 ? "a bench should ask for"
                 : "this machine has available (" + std::to_string(available >> 20) + " MiB)",
             "; give a smaller --max-bytes");
  MT_REQUIRE(o.ranks_per_process >= 1 && o.ranks_per_process <= kMaxLocalRanks,
             "--ranks-per-process must be in 1..", kMaxLocalRanks);
  MT_REQUIRE(o.ranks_per_process == 1 || o.backend == Backend::mpi,
             "--ranks-per-process needs --backend mpi");
  MT_REQUIRE(o.iters >= 1 && o.repeats >= 1, "--iters and --repeats must be at least 1");
  WorldOptions wopts;
  wopts.timeout_s = o.timeout_s;

  std::atomic<bool> all_ok{true};
  RankMain body = [&](CommWorld& w) {
    auto c = w.world();
    const int n = c->size();
    const bool printer = w.rank() == 0;
    if (printer) {
      out << "# meshtrain bench comm: " << bench_op_name(o.op) << ", backend " << w.backend_name()
          << ", " << n << " ranks";
      if (o.ranks_per_process > 1) out << " (" << o.ranks_per_process << " per process)";
      out << ", float32, " << (o.in_place ? "in place" : "out of place") << ", time = median of "
          << o.repeats << " x " << o.iters << " calls\n"
          << "# busbw = algbw * " << std::setprecision(3) << bus_factor(o.op, n) << "\n"
          << std::setw(12) << "bytes" << std::setw(12) << "count" << std::setw(12) << "time(us)"
          << std::setw(12) << "algbw(GB/s)" << std::setw(12) << "busbw(GB/s)"
          << (o.check ? "  check" : "") << (o.memcpy_baseline ? "  memcpy(GB/s)" : "") << "\n";
    }
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
      const Row r = bench_size(*c, o, bytes);
      if (!r.ok) all_ok = false;
      double mc = 0;
      if (o.memcpy_baseline && printer) mc = r.bytes / memcpy_seconds(r.bytes, o.iters) / 1e9;
      if (o.memcpy_baseline) c->barrier().wait();  // keep the other ranks off the memory bus
      if (!printer) continue;
      const double algbw = r.bytes / r.seconds / 1e9;
      out << std::fixed << std::setw(12) << r.bytes << std::setw(12) << r.count << std::setw(12)
          << std::setprecision(1) << r.seconds * 1e6 << std::setw(12) << std::setprecision(2)
          << algbw << std::setw(12) << algbw * bus_factor(o.op, n);
      if (o.check) out << (r.ok ? "     ok" : "  WRONG");
      if (o.memcpy_baseline) out << std::setw(14) << mc;
      out << "\n" << std::flush;
      out.unsetf(std::ios::fixed);
    }
  };
  if (o.backend == Backend::local) {
    run_local(o.ranks, wopts, body);
  } else if (o.ranks_per_process > 1) {
    run_hybrid(argc, argv, o.ranks_per_process, wopts, body);
  } else {
    run_mpi(argc, argv, wopts, body);
  }
  return all_ok ? 0 : 1;
}

}  // namespace mt
