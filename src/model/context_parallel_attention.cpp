#include "model/context_parallel_attention.h"

#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/bf16.h"
#include "model/zigzag_layout.h"

namespace mt {

namespace {

// Tags of the ring's two streams (distinct from the pipeline's and the global view's).
int kv_tag() {
  return make_p2p_tag(P2PKind::user, 240, 0);
}
int dkv_tag() {
  return make_p2p_tag(P2PKind::user, 241, 0);
}

// buf (B * Tk, 2 w) = [K | V] of a's key rows: the block that travels.
void pack_kv(float* buf, const FlashAttention& a, int w) {
  const int rows = a.B * a.Tk;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    std::memcpy(buf + size_t(i) * 2 * w, a.k + size_t(i) * a.ldk, sizeof(float) * w);
    std::memcpy(buf + size_t(i) * 2 * w + w, a.v + size_t(i) * a.ldv, sizeof(float) * w);
  }
}

// g.dk, g.dv += the [dK | dV] block buf (B * Tk, 2 w).
void add_kv_grads(const FlashGrads& g, const float* buf, int rows, int w) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < rows; i++) {
    const float* src = buf + size_t(i) * 2 * w;
    float *dk = g.dk + size_t(i) * g.lddk, *dv = g.dv + size_t(i) * g.lddv;
    for (int d = 0; d < w; d++) dk[d] += src[d];
    for (int d = 0; d < w; d++) dv[d] += src[w + d];
  }
}

void add_inplace(float* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

}  // namespace

ContextParallelAttention::ContextParallelAttention(const ContextParallelShard& cp, int seq,
                                                   size_t max_rows, int kv_width, Arena::Mode mode)
    : cp_(cp), kv_width_(kv_width) {
  MT_CHECK(cp.size > 1 && cp.comm && cp.comm->size() == cp.size && cp.comm->rank() == cp.rank,
           "context-parallel attention needs its cp group");
  for (int r = 0; r < cp.size; ++r) positions_.push_back(zigzag_positions(seq, cp.size, r));
  const size_t block = max_rows * 2 * size_t(kv_width);
  const size_t blocks = cp.mode == CpComm::ring ? 5 : 2 * size_t(cp.size) + 1;
  buffers_ = Arena(blocks * block, mode);
}

size_t ContextParallelAttention::block_floats(const FlashAttention& a) const {
  const size_t n = size_t(a.B) * a.Tk * 2 * kv_width_;
  MT_CHECK(a.Hkv * a.hd == kv_width_ && a.Tq == a.Tk && a.Tk == int(positions_[0].size()) &&
               n * (cp_.mode == CpComm::ring ? 5 : 2 * size_t(cp_.size) + 1) <= buffers_.size(),
           "context-parallel attention: a call of ", a.B, " x ", a.Tk, " rows x ", a.Hkv * a.hd,
           " kv columns outside what it was sized for");
  return n;
}

FlashAttention ContextParallelAttention::visiting(const FlashAttention& a, const float* kv,
                                                  int source) const {
  FlashAttention v = a;
  v.k = kv;
  v.v = kv + kv_width_;
  v.ldk = v.ldv = 2 * size_t(kv_width_);
  v.kpos = positions_of(source);
  return v;
}

void ContextParallelAttention::forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
                                       std::span<float> scratch) {
  if (cp_.mode == CpComm::ring) return ring_forward(out, ldo, lse, a, scratch);
  allgather_forward(out, ldo, lse, a, scratch);
}

void ContextParallelAttention::backward(const FlashGrads& g, const float* dout, size_t lddo,
                                        const float* lse, const float* D, const FlashAttention& a,
                                        std::span<float> scratch) {
  if (cp_.mode == CpComm::ring) return ring_backward(g, dout, lddo, lse, D, a, scratch);
  allgather_backward(g, dout, lddo, lse, D, a, scratch);
}

double ContextParallelAttention::now() const {
  return sink_ ? now_seconds() : 0;
}

void ContextParallelAttention::report(const std::string& name, const char* cat, double begin,
                                      double end) const {
  if (sink_) sink_(name, cat, begin, end);
}

void ContextParallelAttention::report_step(const char* pass, int step, int source, double begin,
                                           double computed, double end) const {
  if (!sink_) return;
  const char* kind = cp_.mode == CpComm::ring ? "cp ring " : "cp allgather ";
  const std::string head = kind + std::string(pass) + std::to_string(step);
  sink_(head + " K/V of cp " + std::to_string(source), "compute", begin, computed);
  if (end > computed) sink_(head + " wait", "comm", computed, end);
}

// ---- ring ---------------------------------------------------------------------------------

// The ring's K/V blocks. fp32 operands: they travel as they are and the kernel reads the one
// held. bf16 operands (--precision bf16): they travel in bf16, half the bytes (the kernel
// rounds its K and V operands to bf16 anyway; K is rounded before its RoPE rotation instead
// of after), and each arriving block is widened into `work` for the kernel; the own block
// is computed on from `work` as packed. dK/dV travel in fp32 either way (sums).
ContextParallelAttention::RingBlocks ContextParallelAttention::ring_blocks(const FlashAttention& a,
                                                                           size_t n) {
  float* base = buffers_.data();
  if (a.precision != FlashPrecision::bf16) {
    pack_kv(base, a, kv_width_);
    return {nullptr, reinterpret_cast<char*>(base), reinterpret_cast<char*>(base + n),
            n * sizeof(float), base + 2 * n};
  }
  char* held = reinterpret_cast<char*>(base + n);
  pack_kv(base, a, kv_width_);
  to_bf16(reinterpret_cast<bf16*>(held), base, n);
  return {base, held, held + n * sizeof(bf16), n * sizeof(bf16), base + 2 * n};
}

// The fp32 block the kernel reads at ring step s from the travelling block `held`.
const float* ContextParallelAttention::resident(const RingBlocks& b, const char* held, size_t n,
                                                int s) const {
  if (!b.work) return reinterpret_cast<const float*>(held);
  if (s > 0) from_bf16(b.work, reinterpret_cast<const bf16*>(held), n);
  return b.work;
}

void ContextParallelAttention::ring_forward(float* out, size_t ldo, float* lse,
                                            const FlashAttention& a, std::span<float> scratch) {
  const size_t n = block_floats(a);
  const int N = cp_.size, r = cp_.rank, next = (r + 1) % N, prev = (r + N - 1) % N;
  const RingBlocks b = ring_blocks(a, n);
  char *held = b.held, *arriving = b.arriving;
  for (int s = 0; s < N; ++s) {
    // Post the block's next hop before computing on it: the transfer hides behind the step.
    const double begin = now();
    Work sent, received;
    if (s + 1 < N) {
      sent = cp_.comm->send(held, b.bytes, DType::u8, next, kv_tag());
      received = cp_.comm->recv(arriving, b.bytes, DType::u8, prev, kv_tag());
    }
    const int source = (r + N - s) % N;
    const float* kv = resident(b, held, n, s);
    flash_attention_forward(out, ldo, lse, visiting(a, kv, source), s > 0, scratch);
    const double computed = now();
    sent.wait();
    received.wait();
    report_step("F", s, source, begin, computed, s + 1 < N ? now() : computed);
    std::swap(held, arriving);
  }
}

// Step s holds rank (r - s)'s K/V and the dK/dV its previous holders summed (received at
// the end of step s - 1); it adds its own share and passes the sum on. The block's last
// holder, rank r - 1, sends it home after step N - 1.
void ContextParallelAttention::ring_backward(const FlashGrads& g, const float* dout, size_t lddo,
                                             const float* lse, const float* D,
                                             const FlashAttention& a, std::span<float> scratch) {
  const size_t n = block_floats(a);
  const int N = cp_.size, r = cp_.rank, next = (r + 1) % N, prev = (r + N - 1) % N;
  const RingBlocks b = ring_blocks(a, n);
  char *held = b.held, *arriving = b.arriving;
  float *share = b.grads, *outgoing = share + n, *incoming = outgoing + n;
  const size_t ld = 2 * size_t(kv_width_);
  Work grad_sent, grad_received;
  for (int s = 0; s < N; ++s) {
    const double begin = now();
    Work sent, received;
    if (s + 1 < N) {
      sent = cp_.comm->send(held, b.bytes, DType::u8, next, kv_tag());
      received = cp_.comm->recv(arriving, b.bytes, DType::u8, prev, kv_tag());
    }
    std::memset(share, 0, n * sizeof(float));
    const FlashGrads step{g.dq, share, share + kv_width_, g.lddq, ld, ld};
    const int source = (r + N - s) % N;
    const float* kv = resident(b, held, n, s);
    flash_attention_backward(step, dout, lddo, lse, D, visiting(a, kv, source), scratch);
    const double computed = now();
    if (s > 0) {
      grad_received.wait();
      add_inplace(share, incoming, n);
    }
    grad_sent.wait();  // `outgoing` is free again
    std::swap(share, outgoing);
    grad_sent = cp_.comm->send(outgoing, n, DType::f32, next, dkv_tag());
    grad_received = cp_.comm->recv(incoming, n, DType::f32, prev, dkv_tag());
    sent.wait();
    received.wait();
    report_step("B", s, source, begin, computed, now());
    std::swap(held, arriving);
  }
  const double home = now();
  grad_received.wait();  // this rank's own block, home with every rank's share
  grad_sent.wait();
  report("cp ring B home", "comm", home, now());
  add_kv_grads(g, incoming, a.B * a.Tk, kv_width_);
}

// ---- all-gather ---------------------------------------------------------------------------

void ContextParallelAttention::allgather_forward(float* out, size_t ldo, float* lse,
                                                 const FlashAttention& a,
                                                 std::span<float> scratch) {
  const size_t n = block_floats(a);
  const int N = cp_.size, r = cp_.rank;
  float* all = buffers_.data();
  pack_kv(all + size_t(r) * n, a, kv_width_);
  const double gather = now();
  cp_.comm->all_gather(all + size_t(r) * n, all, n, DType::f32).wait();
  report("cp all-gather K/V", "comm", gather, now());
  for (int s = 0; s < N; ++s) {
    const double begin = now();
    const int source = (r + N - s) % N;  // the ring's order: the same bits as the ring
    flash_attention_forward(out, ldo, lse, visiting(a, all + size_t(source) * n, source), s > 0,
                            scratch);
    const double end = now();
    report_step("F", s, source, begin, end, end);
  }
}

void ContextParallelAttention::allgather_backward(const FlashGrads& g, const float* dout,
                                                  size_t lddo, const float* lse, const float* D,
                                                  const FlashAttention& a,
                                                  std::span<float> scratch) {
  const size_t n = block_floats(a);
  const int N = cp_.size, r = cp_.rank;
  float *all = buffers_.data(), *grads = all + size_t(N) * n, *own = grads + size_t(N) * n;
  const size_t ld = 2 * size_t(kv_width_);
  pack_kv(all + size_t(r) * n, a, kv_width_);
  const double gather = now();
  cp_.comm->all_gather(all + size_t(r) * n, all, n, DType::f32).wait();
  report("cp all-gather K/V", "comm", gather, now());
  std::memset(grads, 0, size_t(N) * n * sizeof(float));
  for (int s = 0; s < N; ++s) {
    const double begin = now();
    const int source = (r + N - s) % N;
    float* dkv = grads + size_t(source) * n;
    const FlashGrads step{g.dq, dkv, dkv + kv_width_, g.lddq, ld, ld};
    flash_attention_backward(step, dout, lddo, lse, D,
                             visiting(a, all + size_t(source) * n, source), scratch);
    const double end = now();
    report_step("B", s, source, begin, end, end);
  }
  const double scatter = now();
  cp_.comm->reduce_scatter(grads, own, n, DType::f32, ReduceOp::sum).wait();
  report("cp reduce-scatter dK/dV", "comm", scatter, now());
  add_kv_grads(g, own, a.B * a.Tk, kv_width_);
}

}  // namespace mt
