// Attention across the context-parallel group (docs/contracts.md §11, docs/context_parallel.md):
// each of the N ranks holds its zigzag rows of every sequence (model/zigzag_layout.h), and
// every query must see the keys of all ranks. Only the Hkv kv heads travel (GQA: never the
// H query heads' copies).
//
//   ring       forward: step s = 0..N-1 attends to the K/V block of rank r - s (its own
//              first), merged into (out, lse) in fp32 with log-sum-exp weights (the flash
//              kernel's accumulate). While step s computes, its block is already being sent to
//              rank r + 1 and the next one received from rank r - 1 (asynchronous send/recv),
//              so each transfer hides behind the attention of the block in hand.
//              backward: the same walk; each visiting block carries a dK/dV accumulator that
//              the holder adds its share to and passes on with the block (the transfer of
//              step s's sum overlaps step s + 1's compute); one last hop brings every block's
//              complete dK/dV home. Each step recomputes its probabilities from the FINAL
//              merged lse and D = rowsum(dO * O), and reads the K/V block it holds at that
//              step, never the first one.
//   allgather  forward: one all-gather of every rank's K/V, then the N blocks in the ring's
//              order (so both modes' forwards give the same bits in fp32); backward: the all-gather
//              again, each block's dK/dV into its own slot, one reduce-scatter sums them to their
//              owners.
//   zigzag     rank r's rows are chunks r and 2N-1-r. Against rank j's block, j < r: its
//              chunk j is visible to all of r's rows and its chunk 2N-1-j to none; j > r:
//              chunk r's rows see nothing, chunk 2N-1-r's rows see all of it. The kernel
//              classifies (query block, key block) pairs by their position ranges, so these
//              halves are skipped or run unmasked with no per-element mask (blocks of 64
//              query and 32 key rows: exactly so when T / 2N is a multiple of 64).
//   bf16       under bf16 operands (--precision bf16) the ring's K/V blocks travel in bf16,
//              half the bytes (the kernel rounds them to bf16 anyway; K before its RoPE
//              rotation instead of after); dK/dV and every merge stay fp32. The all-gather
//              still moves fp32.
//   memory     ring: 2 K/V blocks + 3 dK/dV blocks of b*T/N rows x 2 Hkv hd (bf16: 2 bf16
//              K/V blocks and one fp32 one to compute on, in the same space); allgather: 2N + 1.
//   failures   a peer that fails mid-ring fails this rank's wait (the communicator's timeout
//              and abort), naming it.
//   trace      with a step sink (set_step_sink; --trace), every ring step reports a span on
//              this rank's track: "cp ring F<s> K/V of cp <j>" (compute: the attention to rank
//              j's block while the next hop is in flight) and, when the hop was not yet done,
//              "cp ring F<s> wait" (comm: the part of the transfer NOT hidden); the backward
//              likewise as B<s>, and "cp ring B home" for the last hop of dK/dV. The all-gather
//              reports "cp all-gather K/V", "cp allgather F<s> K/V of cp <j>" (B<s>) and
//              "cp reduce-scatter dK/dV".
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/arena.h"
#include "kernels/flash_attention.h"
#include "model/context_parallel_shard.h"

namespace mt {

// Receives each span as it ends: name, category ("compute" or "comm") and [begin, end) in
// seconds on the steady clock (core/timer.h); Trace::add has this signature.
using CpSpanSink =
    std::function<void(const std::string& name, const char* cat, double begin, double end)>;

class ContextParallelAttention {
 public:
  // seq: the whole sequence's length T; max_rows: b * T / N of the largest microbatch;
  // kv_width: Hkv hd of this rank's kv heads.
  ContextParallelAttention(const ContextParallelShard& cp, int seq, size_t max_rows, int kv_width,
                           Arena::Mode mode = Arena::Mode::allocate);

  // This rank's T/N true positions (zigzag), and rank j's.
  const int* positions() const { return positions_[size_t(cp_.rank)].data(); }
  const int* positions_of(int rank) const { return positions_[size_t(rank)].data(); }
  size_t workspace_floats() const { return buffers_.size(); }
  // Where the ring steps' spans go (empty: nowhere, and no clock is read).
  void set_span_sink(CpSpanSink sink) { sink_ = std::move(sink); }

  // As flash_attention_forward(accumulate false) of a's queries over the keys of every rank;
  // a holds this rank's rows (qpos = kpos = positions()). scratch: a's forward scratch.
  void forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
               std::span<float> scratch);
  // g.dq, g.dk, g.dv += the gradients (this rank's rows), from the final lse and D.
  void backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse,
                const float* D, const FlashAttention& a, std::span<float> scratch);

 private:
  size_t block_floats(const FlashAttention& a) const;
  // The ring's buffers for one call (.cpp: fp32, or bf16 blocks widened into work).
  struct RingBlocks {
    float* work;            // null (fp32) or the fp32 block the kernel reads (bf16)
    char *held, *arriving;  // the travelling blocks, `bytes` each
    size_t bytes;
    float* grads;  // backward: share, outgoing, incoming dK/dV (fp32)
  };
  // Packs this rank's K/V (a) into the first held block.
  RingBlocks ring_blocks(const FlashAttention& a, size_t n);
  const float* resident(const RingBlocks& b, const char* held, size_t n, int s) const;
  // a with its keys replaced by a packed [K | V] block of rank `source`.
  FlashAttention visiting(const FlashAttention& a, const float* kv, int source) const;
  void ring_forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
                    std::span<float> scratch);
  void ring_backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse,
                     const float* D, const FlashAttention& a, std::span<float> scratch);
  void allgather_forward(float* out, size_t ldo, float* lse, const FlashAttention& a,
                         std::span<float> scratch);
  void allgather_backward(const FlashGrads& g, const float* dout, size_t lddo, const float* lse,
                          const float* D, const FlashAttention& a, std::span<float> scratch);

  // The spans of ring step `step` of pass `pass` ("F", "B") against rank `source`'s block:
  // its compute [begin, computed), then its wait [computed, end) when there was one.
  void report_step(const char* pass, int step, int source, double begin, double computed,
                   double end) const;
  void report(const std::string& name, const char* cat, double begin, double end) const;
  double now() const;  // the steady clock, read only when a sink listens

  ContextParallelShard cp_;
  CpSpanSink sink_;
  int kv_width_;
  std::vector<std::vector<int>> positions_;  // every rank's zigzag positions
  Arena buffers_;
};

}  // namespace mt
