// The overlapped exchange of one MoE layer (--moe-overlap-parts P > 1; docs/moe.md,
// "Overlapped all-to-all"): a microbatch's tokens are cut into P parts of consecutive
// tokens, each part's rows travel to the experts and back by their own all-to-all, and the
// exchanges of one part run while the experts compute another (Megatron-LM's
// --overlap-moe-expert-parallel-comm splits a batch in two the same way):
//
//   dispatch 0 | dispatch 1  | dispatch 2  | ..               |
//              | experts 0   | experts 1   | .. | experts P-1 |
//              |             | combine 0   | .. | combine P-2 | combine P-1
//
// (each dispatch is started two parts ahead: part p+2's before part p's experts, parts 0
// and 1 together, so that part 1's rows travel under the local work too);
//
// Only the first part's dispatch and the last part's combine are exposed, so those two
// parts are the small ones (rows 1 : 2 : .. : 2 : 1): 1/(2P-2) of the exchange, once the
// experts take as long as the exchange. Those two waits are filled with work that does not
// need the exchange. The layer's own work on the token side is cut at the part boundaries: part p's
// send rows are prepared (gathered in forward, gate-scaled in backward) just before its dispatch,
// part 0's while the counts travel and the later parts' while part 0's rows travel; part p's
// returned rows are consumed (summed per token) as soon as its combine is in, the earlier parts'
// while the last combine travels. The caller's LocalWork (the shared experts: Megatron-LM's
// --moe-shared-expert-overlap) runs its first half while part 0's rows travel and its last
// half while the last part's results do. The count exchange itself is started by plan and
// finished by run, after part 0's rows are ready:
//
//   counts | dispatch 0, 1                 | ..                       | combine P-1
//   prep 0 | prep 1 .. P-1, local 1        | experts 0 | .. experts P-1 | local 2, done 0 .. P-1
//
// Routing (and with it the aux loss and the capacity plan) is the whole microbatch's, as
// without parts; each token's experts compute the same rows; only the experts' weight
// gradients are summed part by part (so results equal one worker's to rounding, not bit for
// bit).
//
// Layouts, per microbatch, kept in its slot for the backward pass:
//   send side: the kept rows part-major (part 0's rows expert-sorted, then part 1's, ..);
//              row_of maps each (token, choice) to its part-major row (-1: dropped).
//   receive side: part p's rows, expert-major, in a region of their own, the regions in
//              reverse part order (part P-1's first). An ExpertMlp call on one region may
//              use the rows below it as scratch (expert_mlp.h), and those belong to parts
//              whose experts run later, never to one already computed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/activation_pool.h"
#include "model/expert_mlp.h"
#include "model/token_exchange.h"

namespace mt {

// Work of the rank's own that neither reads nor writes what the exchanges carry (the llama
// block's shared experts, docs/moe.md "Overlapped all-to-all"): the two waits no part's
// experts can fill are filled with it. `first` runs while part 0's rows travel (after every
// part's rows are prepared), `last` while the last part's results travel (before any
// combine is waited for). Either may be empty; a layer without parts runs both after its
// blocking exchanges, in this order.
struct LocalWork {
  std::function<void()> first, last;
  void run_first() const {
    if (first) first();
  }
  void run_last() const {
    if (last) last();
  }
};

class MoeParts {
 public:
  // P parts for a layer of E = ranks * El experts, top-k, up to max_rows token rows.
  MoeParts(int parts, int ranks, int El, int k, int max_rows, SlotLayout& layout);
  int parts() const { return P_; }

  // After routing: the parts of `rows` tokens and their M kept rows (router's row_token,
  // row_of, per-expert send counts), this rank's part-major row_of in the slot, and the
  // counts every rank receives per part (one count exchange over x, started here and
  // finished by the next run). Returns the part-major row_token (valid until the next
  // call), for gathering the rows to send.
  const int32_t* plan(float* s, const int32_t* row_token, const int32_t* row_of,
                      const int32_t* send_counts, int rows, int M, TokenExchange& x);
  // Part-major (token, choice) -> row, as plan left it: (rows, k).
  const int32_t* row_of(float* s) const { return ints(s, off_.row_of); }
  // Part p's tokens of `rows`: [token_begin(p, rows), token_begin(p + 1, rows)). With 3
  // parts or more the first and the last are half the size of the others
  // (model/moe_part_sizes.h says why: the planner prices the parts by the same rule); with
  // 2 they are equal.
  int token_begin(int p, int rows) const;
  // Part p's part-major send rows: [begin, begin + rows).
  struct Span {
    int64_t begin = 0, rows = 0;
  };
  Span send_span(float* s, int p) const;

  // The pipeline above for one pass. `rows` (M, C) holds the part-major rows to send and
  // receives the results back in place; `in` and `out` (R, C) are the experts' input and
  // output rows (in may be out), `staging` (R, C) the exchanges' staging. compute(g) runs
  // the experts on one part's region g, from in to out; prepare(p) writes part p's rows
  // to send (send_span), complete(p) reads its returned rows.
  using Compute = std::function<void(const ExpertGroups& g)>;
  struct Stages {
    std::function<void(int p)> prepare;
    Compute compute;
    std::function<void(int p)> complete;
    // The rank's own work that reads nothing the exchanges carry (LocalWork).
    LocalWork local;
  };
  void run(float* s, TokenExchange& x, float* rows, float* in, float* out, float* staging,
           int width, const Stages& stages);
  // Each part's expert groups in turn (for the weight gradients).
  void for_each_part(float* s, const Compute& compute);

 private:
  static int32_t* ints(float* s, size_t off) { return reinterpret_cast<int32_t*>(s + off); }
  ExchangeCounts counts(float* s, int p) const;
  // Part p's receive region (start row, rows), from the counts.
  Span recv_span(float* s, int p) const;
  ExpertGroups groups(float* s, int p);
  void start_part_counts(float* s, TokenExchange& x);
  void finish_part_counts(float* s);

  int P_, ranks_, El_, k_;
  std::vector<int32_t> part_row_token_, pm_pos_, expert_cursor_, offset_;
  std::vector<int> bounds_;                      // token_begin(0 .. P) of the planned rows
  std::vector<int32_t> counts_out_, counts_in_;  // (ranks, P, El) for the count exchange
  std::unique_ptr<PendingExchange> counts_;      // started by plan, finished by run
  struct {
    size_t send, recv;  // (P, ranks, El) each
    size_t row_of;      // (rows, k)
  } off_{};
};

}  // namespace mt
