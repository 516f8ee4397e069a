// The context-parallel ring's exchange CPU on the local backend (calibration_probes.h): what
// one cp rank's thread spends on the ring's hops, apart from its attention (which
// cp_attention_probe.cpp prices with the block's packing and the dK/dV sums). On the local
// backend a hop is work of the rank threads, not a transfer beside them: the send and the
// receive each allocate and describe their request and take the channel's lock, whichever
// of the two comes second copies the block (comm/local/local_p2p.cpp), and each side waits
// for it. With more rank threads than cores that CPU competes with the attention it was to
// hide behind, so the planner prices it as work on the rank (cost_model.cpp cp_exchange).
//
// The probe runs the ring's own sequence of calls (model/context_parallel_attention.cpp
// ring_forward and ring_backward: per step the K/V block's send and receive, then backward
// the dK/dV sum's send and receive, each waited as the ring waits) on `cp` rank threads
// placed as a step's, a small GEMM standing for each step's attention, and reads each rank
// thread's CPU clock: per hop and rank, a fixed part and a part per byte, fitted from two
// block sizes.
// Thread CPU time does not grow while a thread waits for a core: a loaded machine reads
// about what a quiet one would.
#include <omp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "comm/world.h"
#include "core/timer.h"
#include "kernels/matmul.h"
#include "plan/calibration_probes.h"

namespace mt::plan {

namespace {

// The ring's tags (context_parallel_attention.cpp kv_tag, dkv_tag).
int kv_tag() {
  return make_p2p_tag(P2PKind::user, 240, 0);
}
int dkv_tag() {
  return make_p2p_tag(P2PKind::user, 241, 0);
}

// One layer's hops per rank: cp - 1 K/V hops forward, cp - 1 backward and cp dK/dV hops.
int hops_per_layer(int cp) {
  return 3 * cp - 2;
}

// What stands for a ring step's attention: a small GEMM (about 40 us here), so that the
// hops' waits meet peers that are still computing or waiting for a core, as in a step.
struct StepWork {
  static constexpr int kRows = 128, kIn = 256, kOut = 128;
  std::vector<float> a = std::vector<float>(size_t(kRows) * kIn, 0.1f);
  std::vector<float> w = std::vector<float>(size_t(kOut) * kIn, 0.1f);
  std::vector<float> out = std::vector<float>(size_t(kRows) * kOut);
  void operator()() { matmul_forward(out.data(), a.data(), w.data(), nullptr, kRows, kIn, kOut); }
};

// The forward's K/V hops (ring_forward with `work` for its attention).
void forward_hops(Communicator& c, std::vector<char>& held, std::vector<char>& arriving,
                  StepWork& work) {
  const int N = c.size(), next = (c.rank() + 1) % N, prev = (c.rank() + N - 1) % N;
  for (int s = 0; s + 1 < N; ++s) {
    Work sent = c.send(held.data(), held.size(), DType::u8, next, kv_tag());
    Work received = c.recv(arriving.data(), arriving.size(), DType::u8, prev, kv_tag());
    work();
    sent.wait();
    received.wait();
    std::swap(held, arriving);
  }
}

// The backward's K/V hops and the dK/dV sums' (ring_backward with `work` for its attention,
// without its sums; the last hop brings each rank's own block home).
void backward_hops(Communicator& c, std::vector<char>& held, std::vector<char>& arriving,
                   std::vector<float>& outgoing, std::vector<float>& incoming, StepWork& work) {
  const int N = c.size(), next = (c.rank() + 1) % N, prev = (c.rank() + N - 1) % N;
  Work grad_sent, grad_received;
  for (int s = 0; s < N; ++s) {
    Work sent, received;
    if (s + 1 < N) {
      sent = c.send(held.data(), held.size(), DType::u8, next, kv_tag());
      received = c.recv(arriving.data(), arriving.size(), DType::u8, prev, kv_tag());
    }
    work();
    if (s > 0) grad_received.wait();
    grad_sent.wait();
    grad_sent = c.send(outgoing.data(), outgoing.size(), DType::f32, next, dkv_tag());
    grad_received = c.recv(incoming.data(), incoming.size(), DType::f32, prev, dkv_tag());
    sent.wait();
    received.wait();
    std::swap(held, arriving);
  }
  grad_received.wait();
  grad_sent.wait();
}

// CPU seconds per hop of one rank thread (the mean over ranks) for `layers` layers'
// forward and backward hops of blocks of `floats` fp32 values, after `warmup` untimed ones:
// the loop's CPU less that of the same steps' work alone, run by the same thread.
double cpu_per_hop(int cp, size_t floats, int layers, int warmup) {
  std::vector<double> cpu(size_t(cp), 0);
  run_local(cp, step_placement(), [&](CommWorld& w) {
    omp_set_num_threads(1);
    auto comm = w.world();
    std::vector<char> held(floats * sizeof(float), 1), arriving(held.size());
    std::vector<float> outgoing(floats, 1.0f), incoming(floats);
    StepWork work;
    auto run = [&](int n) {
      for (int l = 0; l < n; ++l) {
        forward_hops(*comm, held, arriving, work);
        backward_hops(*comm, held, arriving, outgoing, incoming, work);
      }
    };
    run(warmup);
    comm->barrier().wait();
    const double t0 = thread_cpu_seconds();
    run(layers);
    const double t1 = thread_cpu_seconds();
    for (int i = 0; i < layers * (2 * cp - 1); ++i) work();  // the steps' work alone
    cpu[size_t(comm->rank())] = (t1 - t0) - (thread_cpu_seconds() - t1);
  });
  double sum = 0;
  for (double t : cpu) sum += t;
  return sum / cp / (double(layers) * hops_per_layer(cp));
}

}  // namespace

CpHopCost cp_hop_cost(int cp, double seconds) {
  // Blocks of the loop's cp layouts (8 sequences of 128, 4 kv heads of 32: a rank's block
  // is 8 x 128 / cp rows x 256 floats) span 32 KiB (one sequence per microbatch, cp 4) to
  // 512 KiB (8 sequences, cp 2): the fit's two ends.
  constexpr size_t kSmall = size_t(8) << 10, kLarge = size_t(128) << 10;  // floats
  const int layers = std::max(8, int(seconds * 400));
  double small = 1e30, large = 1e30;
  for (int rep = 0; rep < 3; ++rep) {  // the least disturbed of three
    small = std::min(small, cpu_per_hop(cp, kSmall, layers, 4));
    large = std::min(large, cpu_per_hop(cp, kLarge, layers / 4, 2));
  }
  const double per_byte = std::max(0.0, (large - small) / double((kLarge - kSmall) * 4));
  return {std::max(0.0, small - per_byte * double(kSmall * 4)), per_byte};
}

void measure_cp_exchange(HardwareProfile& h, const ProbeRun& run) {
  // At cp 4 (4 rank threads on this machine's 2 cores in the loop: waiters yield and sleep
  // instead of spinning, as in every cp layout of 4 ranks): the layouts the ring's CPU
  // decides.
  const CpHopCost c = cp_hop_cost(4, run.seconds);
  h.cp_hop_s = c.fixed_s;
  h.cp_hop_byte_s = c.per_byte_s;
}

void measure_cp_ring(HardwareProfile& h, const ProbeRun& run) {
  measure_cp_attention(h, ProbeRun{0.8 * run.seconds, run.total, run.log});
  measure_cp_exchange(h, ProbeRun{0.2 * run.seconds, run.total, run.log});
}

}  // namespace mt::plan
