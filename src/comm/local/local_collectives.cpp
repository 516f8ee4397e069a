// Shared-memory collective algorithms of the local backend.
//
// Between phase 1 (every member has published its descriptor and its buffers are ready)
// and the closing phase, a member may read any peer's buffers directly; it writes only its
// own. There is no staging copy: data goes from the peer's buffer straight into ours.
#include <cstring>
#include <vector>

#include "comm/local/local_communicator.h"
#include "comm/local/reduce_kernels.h"

namespace mt::local {

namespace {

// Chunk of n*... elements owned by member i: equal slices rounded up to 64 bytes so two
// members never write the same cache line.
struct Chunking {
  size_t per;
  size_t count;
  size_t begin(int i) const { return std::min(count, per * i); }
  size_t end(int i) const { return std::min(count, per * (i + 1)); }
};

Chunking chunking(size_t count, int n, size_t elem) {
  const size_t line = 64 / elem;
  size_t per = (count + n - 1) / n;
  per = (per + line - 1) / line * line;
  return {per, count};
}

const char* at(const void* p, size_t elems, size_t elem) {
  return static_cast<const char*>(p) + elems * elem;
}
char* at(void* p, size_t elems, size_t elem) {
  return static_cast<char*>(p) + elems * elem;
}

}  // namespace

// All-reduce = reduce-scatter + all-gather on the peers' buffers, fused into one pass:
// member r reduces chunk r (a 64-byte-aligned 1/n slice) of every member's send buffer and
// writes the result straight into chunk r of every member's recv buffer; all members work
// in parallel, each on its own chunk. Fusing the gather into the reduction (push instead
// of a second phase that pulls) saves a full read of the result and one synchronisation:
// per rank the memory traffic is n reads and n writes of a 1/n chunk. In place is safe:
// chunk r of any buffer is touched only by member r, and each tile is read from every
// source before it is written.
//
// Buffers much larger than the last-level cache are written with non-temporal stores:
// the result would be evicted before anyone reads it anyway.
void LocalCommunicator::run_all_reduce(const CollDesc& d, uint64_t seq) {
  constexpr size_t kStreamBytes = size_t(16) << 20;
  const int n = size();
  const size_t elem = dtype_size(d.dtype);
  const Chunking ch = chunking(d.count, n, elem);
  const size_t b = ch.begin(me_), len = ch.end(me_) - b;
  if (len == 0) return;
  std::vector<const void*> srcs(n);
  std::vector<void*> dsts(n);
  for (int k = 0; k < n; ++k) {
    const int i = (me_ + k) % n;  // staggered, so members do not all write one buffer at once
    dsts[k] = at(peer(i, seq).recv, b, elem);
  }
  for (int i = 0; i < n; ++i) srcs[i] = at(peer(i, seq).send, b, elem);
  reduce_any(dsts.data(), n, srcs.data(), n, len, d.dtype, d.reduce,
             d.count * elem >= kStreamBytes);
}

// Member r reduces block r of every send buffer into its recv buffer. recv may be block r
// of its own send buffer: nobody else reads that block.
void LocalCommunicator::run_reduce_scatter(const CollDesc& d, uint64_t seq) {
  const int n = size();
  const size_t elem = dtype_size(d.dtype);
  std::vector<const void*> srcs(n);
  for (int i = 0; i < n; ++i) srcs[i] = at(peer(i, seq).send, d.count * me_, elem);
  void* dst = d.recv;
  if (d.count > 0) reduce_any(&dst, 1, srcs.data(), n, d.count, d.dtype, d.reduce, false);
}

// Member r copies every member's send buffer into block i of its recv buffer. When send is
// block r of its own recv buffer (in place), that block is already there.
void LocalCommunicator::run_all_gather(const CollDesc& d, uint64_t seq) {
  const int n = size();
  const size_t elem = dtype_size(d.dtype), bytes = d.count * elem;
  if (bytes == 0) return;
  for (int k = 0; k < n; ++k) {
    const int i = (me_ + k) % n;
    char* dst = at(d.recv, d.count * i, elem);
    const void* src = peer(i, seq).send;
    if (src != dst) std::memcpy(dst, src, bytes);
  }
}

void LocalCommunicator::run_broadcast(const CollDesc& d, uint64_t seq) {
  if (me_ == d.root || d.count == 0) return;
  std::memcpy(d.recv, peer(d.root, seq).send, d.count * dtype_size(d.dtype));
}

// Member r pulls from each member i the block i addressed to r: it starts after the blocks
// i sends to members 0..r-1 and lands after the blocks r receives from members 0..i-1.
void LocalCommunicator::run_all_to_all_v(const CollDesc& d, uint64_t seq) {
  const int n = size();
  const size_t elem = dtype_size(d.dtype);
  size_t recv_off = 0;
  for (int i = 0; i < n; ++i) {
    const CollDesc& src = peer(i, seq);
    size_t send_off = 0;
    for (int j = 0; j < me_; ++j) send_off += src.send_counts[j];
    const size_t cnt = d.recv_counts[i];
    if (cnt > 0) std::memcpy(at(d.recv, recv_off, elem), at(src.send, send_off, elem), cnt * elem);
    recv_off += cnt;
  }
}

}  // namespace mt::local
