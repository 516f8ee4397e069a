#include "parallel/context_parallel/bench_context_parallel.h"

#include <omp.h>

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "core/timer.h"
#include "model/context_parallel_attention.h"

namespace mt {

namespace {

// One layer's attention operands over rows (b, Tl): q, k, v in one fused buffer as the
// blocks hold them, its output, lse, the output gradient and the input gradients.
struct Operands {
  std::vector<float> qkv, out, lse, dout, D, dqkv, fwd, bwd;
  FlashAttention a;

  Operands(const CpBenchOptions& o, int Tl, const int* pos, int seed) {
    const int q = o.heads * o.head_dim, kv = o.kv_heads * o.head_dim, ld = q + 2 * kv;
    const size_t rows = size_t(o.batch) * Tl;
    qkv.resize(rows * ld);
    uint32_t x = 2654435761u * uint32_t(seed + 1);
    for (float& v : qkv) v = float(int((x = x * 1664525u + 1013904223u) >> 9) % 2001 - 1000) / 1e3f;
    a.B = o.batch, a.Tq = a.Tk = Tl, a.H = o.heads, a.Hkv = o.kv_heads, a.hd = o.head_dim;
    a.q = qkv.data(), a.k = a.q + q, a.v = a.k + kv;
    a.ldq = a.ldk = a.ldv = size_t(ld);
    a.qpos = a.kpos = pos;
    out.resize(rows * q), dout.assign(rows * q, 1e-3f), dqkv.resize(rows * ld);
    lse.resize(size_t(o.batch) * o.heads * Tl), D.resize(lse.size());
    fwd.resize(flash_attention_forward_scratch_floats(a));
    bwd.resize(flash_attention_backward_scratch_floats(a));
  }
  // Forward, D, backward: through the cp group when cp is non-null.
  void step(ContextParallelAttention* cp) {
    const size_t q = size_t(a.H) * a.hd;
    if (cp)
      cp->forward(out.data(), q, lse.data(), a, fwd);
    else
      flash_attention_forward(out.data(), q, lse.data(), a, false, fwd);
    flash_attention_backward_prep(D.data(), out.data(), q, dout.data(), q, a.B, a.Tq, a.H, a.hd);
    const FlashGrads g{
        dqkv.data(), dqkv.data() + (a.k - a.q), dqkv.data() + (a.v - a.q), a.ldq, a.ldq, a.ldq};
    if (cp)
      cp->backward(g, dout.data(), q, lse.data(), D.data(), a, bwd);
    else
      flash_attention_backward(g, dout.data(), q, lse.data(), D.data(), a, bwd);
  }
};

struct Timing {
  double seconds = 0, wait = 0;
};

// Median over repeats of the slowest rank's time per step (and its wait on c).
Timing time_steps(Communicator& c, const CpBenchOptions& o, Operands& ops,
                  ContextParallelAttention* cp) {
  ops.step(cp);  // warm up: pages, packing
  std::vector<std::pair<double, double>> runs;
  for (int r = 0; r < o.repeats; ++r) {
    c.barrier().wait();
    const double wait0 = c.stats().wait_seconds;
    Stopwatch sw;
    for (int i = 0; i < o.iters; ++i) ops.step(cp);
    // The slowest rank defines the step (nanoseconds: the communicators have no f64).
    int64_t ns[2] = {int64_t(sw.elapsed() / o.iters * 1e9),
                     int64_t((c.stats().wait_seconds - wait0) / o.iters * 1e9)};
    c.all_reduce(ns, ns, 2, DType::i64, ReduceOp::max).wait();
    runs.push_back({ns[0] * 1e-9, ns[1] * 1e-9});
  }
  std::sort(runs.begin(), runs.end());
  return {runs[runs.size() / 2].first, runs[runs.size() / 2].second};
}

void validate(const CpBenchOptions& o) {
  MT_REQUIRE(o.ranks >= 2 && o.ranks <= kMaxLocalRanks, "--ranks (the cp size) must be in 2..",
             kMaxLocalRanks, " (got ", o.ranks, ")");
  MT_REQUIRE(!o.seqs.empty(), "--seq needs at least one length");
  for (int T : o.seqs)
    MT_REQUIRE(T > 0 && T % (2 * o.ranks) == 0, "--seq ", T,
               " must be divisible by 2 x --ranks = ", 2 * o.ranks, " (the zigzag's 2cp chunks)");
  MT_REQUIRE(o.batch >= 1 && o.heads >= 1 && o.kv_heads >= 1 && o.heads % o.kv_heads == 0,
             "--batch, --heads and --kv-heads must be >= 1, --kv-heads dividing --heads");
  MT_REQUIRE(o.head_dim >= 1 && o.head_dim <= kFlashMaxHeadDim, "--head-dim must be in 1..",
             kFlashMaxHeadDim);
  MT_REQUIRE(o.comm == "ring" || o.comm == "allgather" || o.comm == "both",
             "--comm must be ring, allgather or both (got '", o.comm, "')");
  MT_REQUIRE(o.threads >= 1 && o.iters >= 1 && o.repeats >= 1,
             "--threads, --iters and --repeats must be at least 1");
}

}  // namespace

int run_cp_bench(const CpBenchOptions& o, std::ostream& out) {
  validate(o);
  std::vector<CpComm> modes;
  if (o.comm != "allgather") modes.push_back(CpComm::ring);
  if (o.comm != "ring") modes.push_back(CpComm::allgather);
  WorldOptions wopts;
  wopts.timeout_s = o.timeout_s;
  run_local(o.ranks, wopts, [&](CommWorld& w) {
    omp_set_num_threads(o.threads);
    auto c = w.world();
    const bool printer = w.rank() == 0;
    if (printer)
      out << "# meshtrain bench cp: attention forward + backward, local backend, cp " << o.ranks
          << ", b " << o.batch << ", heads " << o.heads << ", kv heads " << o.kv_heads
          << ", head dim " << o.head_dim << ", fp32, " << o.threads
          << " thread(s) per rank, time = median of " << o.repeats << " x " << o.iters
          << " steps\n# ideal = one worker's time on the whole sequence / cp; wait = blocked on "
             "the cp group (not hidden)\n"
          << std::setw(8) << "seq" << std::setw(11) << "comm" << std::setw(12) << "kv_bytes"
          << std::setw(11) << "time(ms)" << std::setw(11) << "ideal(ms)" << std::setw(8) << "ratio"
          << std::setw(11) << "wait(ms)" << std::setw(8) << "wait%"
          << "\n";
    for (int T : o.seqs) {
      // One worker: rank 0 alone over the whole sequence, the others idle at the barrier.
      std::vector<int> whole(static_cast<size_t>(T));
      for (int t = 0; t < T; ++t) whole[size_t(t)] = t;
      double one = 0;
      if (printer) {
        Operands ops(o, T, whole.data(), 0);
        ops.step(nullptr);
        Stopwatch sw;
        for (int i = 0; i < o.iters; ++i) ops.step(nullptr);
        one = sw.elapsed() / o.iters;
      }
      c->barrier().wait();
      const int Tl = T / o.ranks;
      const size_t block = size_t(o.batch) * Tl * 2 * o.kv_heads * o.head_dim * sizeof(float);
      for (CpComm mode : modes) {
        const ContextParallelShard shard{w.rank(), o.ranks, c.get(), mode};
        ContextParallelAttention cp(shard, T, size_t(o.batch) * Tl, o.kv_heads * o.head_dim);
        Operands ops(o, Tl, cp.positions(), w.rank());
        const Timing t = time_steps(*c, o, ops, &cp);
        if (!printer) continue;
        const double ideal = one / o.ranks;
        out << std::fixed << std::setw(8) << T << std::setw(11)
            << (mode == CpComm::ring ? "ring" : "allgather") << std::setw(12) << block
            << std::setprecision(3) << std::setw(11) << t.seconds * 1e3 << std::setw(11)
            << ideal * 1e3 << std::setprecision(2) << std::setw(8) << t.seconds / ideal
            << std::setprecision(3) << std::setw(11) << t.wait * 1e3 << std::setprecision(1)
            << std::setw(8) << 100 * t.wait / t.seconds << "\n"
            << std::flush;
        out.unsetf(std::ios::fixed);
      }
    }
  });
  return 0;
}

}  // namespace mt
