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
// Buckets are launched asynchronously on the dp communicator as soon as their last unit's
// gradients are final, so the reduction overlaps the rest of backward; the compute thread
// only waits (exposed time) where it needs a result. Stages 0-1 reduce once, after the
// last microbatch; stages 2-3 hold no full gradient buffer, so each microbatch's bucket
// is reduce-scattered and added to the shard (DeepSpeed's behaviour). Stages 1-2 all-gather
// the updated parameters after the optimizer; stage 3 gathers each unit just before its
// forward and backward into one of two rotating buffers (each chunk's edge unit has its
// own, held through the step since the tied head needs it at both ends), prefetching the
// next unit of the same chunk.
//
// Every collective is issued in the same order on every rank (the hooks run in a fixed
// order), and reductions sum in rank order, so runs are bitwise reproducible.
//
// Several chunks per rank (interleaved pipelines, all stages): every chunk's units get
// global unit numbers (chunk 0's first), each chunk gets its own hook adapter, buckets never
// span chunks, and "last microbatch" is tracked per chunk, since one chunk's last backward
// may run before another chunk's earlier ones. Each backward (or W pass) call opens and
// closes all of its chunk's buckets, so one edge-bucket buffer (sized for the largest
// chunk edge) and two block-bucket buffers still suffice; ZeRO-3 keeps one edge gather
// buffer per chunk with a non-empty edge unit (at most two per rank: embedding and head)
// and the two block buffers, which hold any chunk's unit (parameters do not change within
// a step, so a gathered unit stays valid until its buffer is reused).
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/arena.h"
#include "model/gpt.h"
#include "parallel/data_parallel/flat_layout.h"

namespace mt {

struct UpdatePiece {
  size_t table_off, param_off, grad_off, n;
  bool decay;
};

struct DataParallelMemory {
  size_t params_bytes = 0, grads_bytes = 0;  // everything held, buffers included
  size_t param_buffer_bytes = 0;             // ZeRO-3 gather buffers (part of params_bytes)
  size_t grad_buffer_bytes = 0;              // ZeRO-2/3 bucket pool (part of grads_bytes)
};

class DataParallel final {
 public:
  // Takes the model's current (table-layout) parameters, frees its arenas and installs
  // hooks on each of its chunks. bucket_mb: bucket size in MiB.
  DataParallel(GPT& model, std::shared_ptr<Communicator> dp, int zero, double bucket_mb);
  // Expert parallelism (docs/moe.md): the experts' gradients (is_expert_param) are summed
  // over ep_replica, the dp ranks holding the same experts, instead of over dp, and
  // counted once per expert (over ep) by grad_sum_squares. Stages 0-2; call before the
  // first step and before update_pieces() is read. Every dp rank's table has the same
  // shape (E/ep experts each), so the flat layouts line up, but the same offsets hold
  // different experts on the ranks of an ep group: the dp reductions leave the expert
  // ranges alone, every rank updates its experts in full (ZeRO does not shard them; their
  // optimizer state stays on the rank), and the post-optimizer all-gather keeps them.
  void set_expert_groups(std::shared_ptr<Communicator> ep,
                         std::shared_ptr<Communicator> ep_replica);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const FlatLayout& layout() const { return layout_; }
  int zero() const { return zero_; }

  // --- global view (table layout, table().total() floats); all collective over dp ---
  void load_params(const float* global);
  void gather_params(float* global);
  // The runs of elements this rank updates, with their offsets in param_storage() and
  // grad_storage(): every element at stage 0, its own chunks otherwise (plus, under
  // expert parallelism, every element of its experts).
  const std::vector<UpdatePiece>& update_pieces() const { return update_; }
  // Per-element state stored densely in update_pieces() order (the optimizer moments) to
  // and from the global view (this rank's table; its own experts under ep).
  void gather_dense(const float* dense, float* global);
  void scatter_dense(const float* global, float* dense) const;
  // Puts the global parameters back into the model's own arenas and removes the hooks
  // (end of training: export, sampling).
  void restore_model();

  // --- one step ---
  void begin_step();  // zero gradients
  // Stages 0-1 reduce a chunk's gradients only after its last microbatch.
  void begin_microbatch(bool last, int chunk = 0);
  void finish_gradients();  // waits for every bucket
  // After finish_gradients: the dp-reduced gradient of one tensor of the table (numel
  // floats, table layout), identical on every dp rank. Collective over dp unless zero is
  // 0 (each element has one owner after the reduce-scatter: the owners' pieces are summed
  // with zeros, which is exact). write_grad puts such a tensor back into the pieces this
  // rank updates (the tied embedding's sum across pipeline stages).
  void read_grad(const ParamInfo& tensor, float* out);
  void write_grad(const ParamInfo& tensor, const float* in);
  // Sum of squared gradients over the whole model, each parameter counted once. With a
  // tensor-parallel group (tp, null or of one rank: none) the tensors split over tp add up
  // over it, and the replicated ones, identical on every tp rank, count once.
  double grad_sum_squares(Communicator* tp = nullptr);
  // Sums over tp, on the pieces this rank updates, the gradients that each tp rank holds
  // only partially (ParamInfo::tp_partial_grad: LayerNorms under sequence parallelism).
  // Collective over tp; a no-op when no tensor has such gradients.
  void reduce_tp_partial_grads(Communicator* tp);
  void scale_grads(float s);
  float* param_storage() { return params_.data(); }
  float* grad_storage() { return zero_ >= 2 ? grad_shard_.data() : grads_.data(); }
  void after_optimizer();  // stages 1-2: all-gather the updated chunks
  // Stage 3: drops gathered units (after evaluation; parameters change at every step).
  void release_params();
  // Sum of x over the dp group, added in rank order (deterministic, double precision).
  double sum_over(double x);

  // Seconds the compute thread spent blocked on dp communication since the last call.
  double take_exposed_seconds();
  DataParallelMemory memory() const;

 private:
  class ChunkAdapter;
  // The hooks of every chunk, with units numbered globally (unit_base_[chunk] + unit).
  void before_use(int unit, int next_unit);
  void after_use(int unit);
  void before_grads(int unit);
  void grads_final(int unit);

  struct InFlight {
    int bucket, pool;  // pool < 0: reduced in place in grads_
    Work work;
  };
  struct GatherSlot {
    int unit = -1;  // unit whose parameters the buffer holds (or is receiving)
    bool in_use = false;
    Work work;
    Arena buf;
  };
  void wait(Work w);
  void poll();
  bool is_expert_piece(size_t i) const { return i < update_expert_.size() && update_expert_[i]; }
  void reduce_expert_grads();
  void bind(int unit);
  void launch(int bucket);
  void reclaim_oldest();
  // A chunk's unit 0 (embedding, ln_f and the tied head; empty on middle chunks).
  bool is_edge(int unit) const { return unit == unit_base_[size_t(unit_chunk_[size_t(unit)])]; }
  int acquire_pool(int bucket);
  // Stage 3
  GatherSlot* find_slot(int unit);
  GatherSlot* issue_gather(int unit);
  void ensure_gathered(int unit);
  float* gathered(int unit);

  GPT& model_;
  std::vector<std::unique_ptr<ChunkAdapter>> adapters_;  // one per chunk
  std::vector<int> unit_base_, unit_chunk_;  // first global unit of a chunk; chunk of a unit
  std::shared_ptr<Communicator> dp_;
  int zero_, rank_, size_;
  FlatLayout layout_;
  Arena params_;  // flat (stages 0-2) or shard (stage 3)
  Arena grads_;   // flat (stages 0-1)
  Arena grad_shard_;
  std::vector<Arena> pool_;  // stages 2-3: bucket gradient buffers
  std::vector<int> pool_bucket_, bucket_pool_, bucket_done_;
  std::vector<char> edge_bucket_;  // per bucket: holds a chunk's edge unit (pool_[0])
  std::deque<InFlight> inflight_;
  std::vector<GatherSlot> edges_;  // per chunk (a buffer only for non-empty edge units)
  std::array<GatherSlot, 2> slots_;
  std::vector<float*> pbase_, gbase_;  // current binding of each unit
  std::vector<UpdatePiece> update_;
  std::vector<const ParamInfo*> update_param_;  // the tensor of each update piece
  std::vector<char> last_microbatch_;           // per chunk
  // Expert parallelism: flat ranges of the expert tensors, a copy of their local gradients
  // taken before the dp reduction overwrites them (stages 0-1) or their gradient slot at
  // the end of the shard (stage 2: grad_shard_ + shard_size()), and the two groups.
  std::vector<std::pair<size_t, size_t>> expert_ranges_;  // (flat offset, n)
  std::vector<float> expert_saved_;                       // packed in expert_ranges_ order
  std::vector<char> update_expert_;                       // per update piece
  std::shared_ptr<Communicator> ep_, ep_replica_;
  double exposed_ = 0;
};

}  // namespace mt
