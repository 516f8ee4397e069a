// Synchronous data parallelism with ZeRO stages 0-3 for one rank (both backends).
//
// The engine takes over the model's parameter and gradient storage, lays it out in the
// padded flat space of FlatLayout and drives the reductions from the model's unit hooks:
//
//   stage | parameters           | gradients                  | optimizer state
//   0     | full (flat)          | full; all-reduce / bucket  | full
//   1     | full                 | full; reduce-scatter       | own chunks
//   2     | full                 | own chunks + bucket pool   | own chunks
//   3     | own chunks + gather  | own chunks + bucket pool   | own chunks
//
// A facade over three pieces, each in its own file: the bucketed gradient reduction
// (grad_buckets.h: buckets, the ZeRO 2-3 buffer pool, counting each unit's backward
// passes), the ZeRO-3 parameter gathers (param_gathers.h) and the expert ranges kept out of
// the dp reduction (expert_ranges.h). It owns the flat parameters and the update pieces,
// forwards the model's hooks to the pieces, and provides the global view (checkpoints).
// Stages 1-2 all-gather the updated parameters after the optimizer.
//
// Every collective is issued in the same order on every rank (the hooks run in a fixed
// order), and reductions sum in rank order, so runs are bitwise reproducible.
//
// Several chunks per rank (interleaved pipelines, all stages): every chunk's units get
// global unit numbers (chunk 0's first) and each chunk its own hook adapter; buckets never
// span chunks. One exception shares a unit between chunks: a rank holding the embedding
// and the tied head in different chunks (DualPipeV's stage 0) keeps both ends' tensors in
// the embedding chunk's edge unit (GPT::edge_chunk); the head's chunk binds and gathers
// that unit, and its gradients are final after both chunks' passes (2 per microbatch).
// The global gradient norm is global_grad_sum_squares (parallel/grad_norm.h).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/rank_order_sum.h"
#include "core/arena.h"
#include "model/gpt.h"
#include "parallel/data_parallel/expert_ranges.h"
#include "parallel/data_parallel/exposed_time.h"
#include "parallel/data_parallel/flat_layout.h"
#include "parallel/data_parallel/grad_buckets.h"
#include "parallel/data_parallel/param_gathers.h"
#include "parallel/data_parallel/piece_squares.h"

namespace mt {

struct UpdatePiece {
  size_t table_off, param_off, grad_off, n;
  bool decay;
};

struct DataParallelMemory {
  size_t params_bytes = 0, grads_bytes = 0;  // everything held, buffers included
  size_t param_buffer_bytes = 0;             // ZeRO-3 gather buffers (part of params_bytes)
  size_t grad_buffer_bytes = 0;              // ZeRO-2/3 bucket pool (part of grads_bytes)
  size_t expert_copy_bytes = 0;  // expert parallelism: the experts' copy aside (in neither)
};

struct DataParallelOptions {
  std::shared_ptr<Communicator> dp;
  int zero = 0;           // ZeRO stage, 0-3
  double bucket_mb = 25;  // bucket size in MiB
  // Expert parallelism (docs/moe.md); null or of one rank: none. The experts' gradients
  // (is_expert_param) are summed over ep_replica, the dp ranks holding the same experts,
  // instead of over dp, and counted once per expert (over ep) in the gradient norm. ZeRO
  // 0-2 (the user-facing rule is checked before ranks start): every dp rank's table has
  // the same shape, but the same offsets hold different experts on the ranks of an ep
  // group, so the dp reductions leave them alone, every rank updates its experts in full
  // (ZeRO does not shard them) and the post-optimizer all-gather keeps them.
  std::shared_ptr<Communicator> ep = nullptr, ep_replica = nullptr;
  // Context parallelism (--cp > 1; null otherwise): dp above is the dp_cp group. cp: the
  // ranks whose gradients are partial sums of one replica's (its rows of the sequences),
  // reduced at every step, local steps (--dp-sync) included; replicas: the dp group, one
  // rank per replica, over which --dp-sync averages.
  std::shared_ptr<Communicator> cp = nullptr, replicas = nullptr;
  // Stages 0-1 without experts: the norm's squares of the buckets already reduced are
  // taken while finish_gradients waits for the later ones (piece_squares.h); the same
  // bits either way. false: all at local_grad_squares, as before (tests compare the two).
  bool squares_while_waiting = true;
};

// The squared gradients of the pieces this rank updates, by how they add up over the
// other ranks (global_grad_sum_squares).
struct LocalGradSquares {
  double split = 0;       // tensors split over tp
  double replicated = 0;  // tensors whole on every tp rank
  double experts = 0;     // this rank's experts (expert parallelism)
};

class DataParallel final {
 public:
  // Takes the model's current (table-layout) parameters, frees its arenas and installs
  // hooks on each of its chunks.
  DataParallel(GPT& model, DataParallelOptions o);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The flat layout the engine gives a model's units (unit_ranges: every chunk's, chunk 0's
  // first; units_per_chunk: how many each chunk has; experts_apart: expert parallelism,
  // DataParallelOptions::ep of more than one rank).
  static FlatLayout flat_layout(const ParamTable& table,
                                const std::vector<std::pair<size_t, size_t>>& unit_ranges,
                                const std::vector<int>& units_per_chunk, int dp, int dp_rank,
                                int zero, double bucket_mb, bool experts_apart);
  // What the engine would hold for units of these ranges (as flat_layout's), sized as its
  // constructor sizes its storage; expert_floats: its experts' elements under expert
  // parallelism (0 otherwise); experts_apart: expert parallelism (as flat_layout's, also
  // for a stage holding no experts). The memory estimate asks this without an engine.
  static DataParallelMemory memory_of(const std::vector<std::pair<size_t, size_t>>& unit_ranges,
                                      const std::vector<int>& units_per_chunk, int dp, int zero,
                                      double bucket_mb, size_t expert_floats, bool experts_apart);

  const FlatLayout& layout() const { return layout_; }
  int zero() const { return zero_; }

  // --- global view (table layout, table().total() floats); all collective over dp ---
  void load_params(const float* global);
  void gather_params(float* global);
  // The runs of elements this rank updates, with their offsets in param_storage() and
  // grad_storage(): every element at stage 0, its own chunks otherwise (plus, under
  // expert parallelism, every element of its experts, after all the others).
  const std::vector<UpdatePiece>& update_pieces() const { return update_; }
  // Per-element state stored densely in update_pieces() order (the optimizer moments) to
  // and from the global view (this rank's table; its own experts under ep).
  void gather_dense(const float* dense, float* global);
  void scatter_dense(const float* global, float* dense) const;
  // Puts the global parameters back into the model's own arenas and removes the hooks
  // (end of training: export, sampling).
  void restore_model();

  // --- one step ---
  // Zeroes the gradients; each chunk will run `microbatches` backward passes (fused, or
  // split into B and W) before finish_gradients. The hooks count them, so stages 0-1
  // reduce a chunk's gradients after its last pass, whatever the schedule. Forward-only
  // passes (evaluation) do not count.
  void begin_step(int microbatches);
  void finish_gradients();  // waits for every bucket
  // After finish_gradients: the dp-reduced gradient of one tensor of the table (numel
  // floats, table layout), identical on every dp rank. Collective over dp unless zero is
  // 0 (each element has one owner after the reduce-scatter: the owners' pieces are summed
  // with zeros, which is exact). write_grad puts such a tensor back into the pieces this
  // rank updates (the tied embedding's sum across pipeline stages).
  void read_grad(const ParamInfo& tensor, float* out);
  void write_grad(const ParamInfo& tensor, const float* in);
  // After finish_gradients: sums of squares over the pieces this rank updates (no
  // communication). has_experts: some of them are experts, whose sum adds up over ep().
  // The pieces squared while finish_gradients waited are not read again (piece_squares.h).
  LocalGradSquares local_grad_squares();
  // Floats of gradients squared while finish_gradients waited, this step.
  size_t squared_while_waiting() const { return squares_.early_floats(); }
  bool has_experts() const { return !experts_.empty(); }
  Communicator* ep() const { return experts_.ep(); }
  // Sums over tp, on the pieces this rank updates, the gradients that each tp rank holds
  // only partially (ParamInfo::tp_partial_grad: LayerNorms under sequence parallelism).
  // Collective over tp; a no-op when no tensor has such gradients.
  void reduce_tp_partial_grads(Communicator* tp);
  void scale_grads(float s);
  // --dp-sync (replica_sync.h): the next steps' gradients stay this replica's own (summed
  // over its cp ranks only).
  void set_local_gradients(bool local) { grads_.set_local(local, cp_.get()); }
  Communicator& dp_group() { return *dp_; }
  // One rank per data-parallel replica: dp_group() without cp.
  Communicator& replica_group() { return replicas_ ? *replicas_ : *dp_; }
  float* param_storage() { return params_.data(); }
  size_t param_storage_floats() const { return params_.size(); }
  float* grad_storage() { return grads_.storage(); }
  void after_optimizer();  // stages 1-2: all-gather the updated chunks
  // Stage 3: drops gathered units (after evaluation; parameters change at every step).
  void release_params();
  // Sum of x over the dp group, added in rank order (deterministic, double precision).
  double sum_over(double x);
  // sum_over in two halves (comm/rank_order_sum.h): issued now, queued behind the
  // collectives already issued; finish_sum waits (a wait that blocks counts as exposed)
  // and returns the same double. A step issues its loss's sum before finish_gradients, so
  // that the ranks meet once a step, at the gradients, instead of twice.
  RankOrderSum issue_sum_over(double x) { return RankOrderSum(*dp_, x); }
  double finish_sum(RankOrderSum& sum);
  // The dp group's collectives issued (CommStats::calls) when finish_gradients began to
  // wait. One issued after it is a second point of the step where the ranks meet
  // (tests/train/test_step_meetings.cpp counts them).
  uint64_t calls_at_gradient_wait() const { return calls_at_gradient_wait_; }

  // Seconds the compute thread spent blocked on dp communication since the last call.
  double take_exposed_seconds() { return exposed_.take(); }
  DataParallelMemory memory() const;

 private:
  class ChunkAdapter;
  // The hooks of every chunk, with units numbered globally (layout().first_unit(chunk) + unit).
  void before_use(int unit, int next_unit);
  void after_use(int unit);
  void before_grads(int unit);
  void grads_final(int unit);
  void poll();
  void bind(int unit);
  bool is_expert_piece(size_t i) const { return i >= first_expert_; }

  GPT& model_;
  std::shared_ptr<Communicator> dp_;
  std::shared_ptr<Communicator> cp_, replicas_;  // DataParallelOptions::cp, replicas
  const int zero_, rank_, size_;
  FlatLayout layout_;
  std::vector<UpdatePiece> update_;
  std::vector<const ParamInfo*> update_param_;  // the tensor of each update piece
  size_t first_expert_ = 0;  // update_[i] is an expert from here on (update_.size(): none)
  ExposedTime exposed_;
  uint64_t calls_at_gradient_wait_ = 0;
  ExpertRanges experts_;
  Arena params_;  // flat (stages 0-2) or shard (stage 3)
  // The (chunk, chunk unit) pairs bound to each global unit (one, or more for a shared edge).
  std::vector<std::vector<std::pair<int, int>>> users_;
  GradBuckets grads_;
  PieceSquares squares_;                   // the norm's per-piece sums (local_grad_squares)
  std::unique_ptr<ParamGathers> gathers_;  // stage 3
  std::vector<float*> pbase_, gbase_;      // current binding of each unit
  std::vector<std::unique_ptr<ChunkAdapter>> adapters_;  // one per chunk
};

}  // namespace mt
