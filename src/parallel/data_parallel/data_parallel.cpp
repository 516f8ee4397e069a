#include "parallel/data_parallel/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "comm/rank_order_sum.h"
#include "core/error.h"
#include "core/timer.h"
#include "kernels/reduce.h"

namespace mt {

namespace {

// Every chunk's units, chunk 0's first (the chunks registered their tensors in order).
std::vector<std::pair<size_t, size_t>> unit_ranges(GPT& m) {
  std::vector<std::pair<size_t, size_t>> r;
  for (int c = 0; c < m.num_chunks(); ++c)
    for (int u = 0; u < m.chunk(c).num_units(); ++u) r.push_back(m.chunk(c).unit_range(u));
  return r;
}

std::vector<int> units_per_chunk(GPT& m) {
  std::vector<int> n;
  for (int c = 0; c < m.num_chunks(); ++c) n.push_back(m.chunk(c).num_units());
  return n;
}

size_t bucket_floats(double mb) {
  return size_t(mb * 1024 * 1024 / sizeof(float));
}

// Entries are in ascending offset order: a binary search, since this runs once per piece
// (a linear scan made a model of many layers quadratic to set up).
const ParamInfo* tensor_at(const ParamTable& table, size_t table_off) {
  const auto& e = table.entries();
  auto it = std::upper_bound(e.begin(), e.end(), table_off,
                             [](size_t off, const ParamInfo& p) { return off < p.offset; });
  MT_CHECK(it != e.begin() && table_off < std::prev(it)->offset + std::prev(it)->numel,
           "no tensor at arena offset ", table_off);
  return &*std::prev(it);
}

}  // namespace

// Forwards one chunk's hooks to the engine with the chunk's units renumbered globally.
class DataParallel::ChunkAdapter final : public ChunkHooks {
 public:
  ChunkAdapter(DataParallel& dp, int base) : dp_(dp), base_(base) {}
  void before_use(int unit, int next) override {
    dp_.before_use(base_ + unit, next < 0 ? -1 : base_ + next);
  }
  void after_use(int unit) override { dp_.after_use(base_ + unit); }
  void before_grads(int unit) override { dp_.before_grads(base_ + unit); }
  void grads_final(int unit) override { dp_.grads_final(base_ + unit); }

 private:
  DataParallel& dp_;
  int base_;
};

DataParallel::DataParallel(GPT& model, std::shared_ptr<Communicator> dp, int zero, double bucket_mb)
    : model_(model),
      dp_(std::move(dp)),
      zero_(zero),
      rank_(dp_->rank()),
      size_(dp_->size()),
      layout_(model.table(), unit_ranges(model), dp_->size(), dp_->rank(), bucket_floats(bucket_mb),
              zero == 3, units_per_chunk(model)) {
  MT_CHECK(zero >= 0 && zero <= 3);
  for (int c = 0; c < model.num_chunks(); ++c) {
    unit_base_.push_back(int(unit_chunk_.size()));
    unit_chunk_.insert(unit_chunk_.end(), size_t(model.chunk(c).num_units()), c);
  }
  last_microbatch_.assign(size_t(model.num_chunks()), 1);
  const size_t nb = layout_.buckets().size(), nu = layout_.units().size();
  edge_bucket_.assign(nb, 0);
  for (int base : unit_base_) edge_bucket_[size_t(layout_.units()[size_t(base)].bucket)] = 1;
  params_.resize(zero_ == 3 ? layout_.shard_size() : layout_.flat_size());
  if (zero_ < 2) {
    grads_.resize(layout_.flat_size());
  } else {
    grad_shard_.resize(layout_.shard_size());
    // Buffer 0 holds a chunk's edge bucket, open through the chunk's whole backward (the
    // tied wte is final only after the embedding); two more take turns: one filling, one
    // in flight. Only one chunk's backward runs at a time, so the chunks share them.
    size_t edge_bucket = 0, block_bucket = 0;
    for (size_t k = 0; k < nb; ++k) {
      size_t& m = edge_bucket_[k] ? edge_bucket : block_bucket;
      m = std::max(m, layout_.buckets()[k].size());
    }
    pool_.emplace_back(edge_bucket);
    for (int i = 0; i < 2; ++i) pool_.emplace_back(block_bucket);
    pool_bucket_.assign(pool_.size(), -1);
  }
  if (zero_ == 3) {
    size_t block_max = 0;
    for (size_t u = 0; u < nu; ++u)
      if (!is_edge(int(u))) block_max = std::max(block_max, layout_.units()[u].padded);
    edges_.resize(size_t(model.num_chunks()));
    for (size_t c = 0; c < edges_.size(); ++c)
      if (size_t n = layout_.units()[size_t(unit_base_[c])].padded) edges_[c].buf.resize(n);
    for (auto& s : slots_) s.buf.resize(block_max);
  }
  bucket_pool_.assign(nb, -1);
  bucket_done_.assign(nb, 0);
  for (const FlatPiece& p : layout_.pieces(/*owned_only=*/zero_ > 0)) {
    update_.push_back({p.table_off, zero_ == 3 ? p.shard_off : p.flat_off,
                       zero_ >= 2 ? p.shard_off : p.flat_off, p.n, p.decay});
    update_param_.push_back(tensor_at(model.table(), p.table_off));
  }
  load_params(model.params().data());
  model.release_arenas();
  pbase_.assign(nu, nullptr);
  gbase_.assign(nu, nullptr);
  for (size_t u = 0; u < nu; ++u) {
    const FlatUnit& fu = layout_.units()[u];
    // Stage 3 binds parameters when a unit is gathered; until then both point at the
    // unit's own flat position or, lacking one, at its gradient (never read then).
    if (zero_ < 3) pbase_[u] = params_.data() + fu.flat - fu.lo;
    if (zero_ < 2) gbase_[u] = grads_.data() + fu.flat - fu.lo;
    if (!pbase_[u]) pbase_[u] = gbase_[u] ? gbase_[u] : pool_[0].data() - fu.lo;
    if (!gbase_[u]) gbase_[u] = pbase_[u];
    bind(int(u));
  }
  for (int c = 0; c < model.num_chunks(); ++c) {
    adapters_.push_back(std::make_unique<ChunkAdapter>(*this, unit_base_[size_t(c)]));
    model.chunk(c).set_hooks(adapters_.back().get());
  }
}

void DataParallel::set_expert_groups(std::shared_ptr<Communicator> ep,
                                     std::shared_ptr<Communicator> ep_replica) {
  MT_REQUIRE(zero_ < 3,
             "--ep > 1 supports --zero 0, 1 or 2 (got --zero 3: its parameter "
             "gathers over dp would mix the experts of different ranks)");
  ep_ = std::move(ep);
  ep_replica_ = std::move(ep_replica);
  // The experts are updated in full by every rank: its own pieces of the other tensors,
  // every piece of its experts (the same flat offsets hold other experts elsewhere).
  std::vector<UpdatePiece> update;
  std::vector<const ParamInfo*> param;
  std::vector<char> expert;
  for (bool experts : {false, true})
    for (const FlatPiece& p : layout_.pieces(/*owned_only=*/zero_ > 0 && !experts)) {
      const ParamInfo* info = tensor_at(model_.table(), p.table_off);
      if (is_expert_param(info->name) != experts) continue;
      update.push_back(
          {p.table_off, p.flat_off, zero_ >= 2 ? p.shard_off : p.flat_off, p.n, p.decay});
      param.push_back(info);
      expert.push_back(experts);
    }
  update_ = std::move(update);
  update_param_ = std::move(param);
  update_expert_ = std::move(expert);
  expert_ranges_.clear();
  size_t total = 0;
  for (size_t i = 0; i < update_.size(); ++i)
    if (update_expert_[i]) {
      expert_ranges_.push_back({update_[i].param_off, update_[i].n});
      // Stage 2: the experts' gradients live after the shard, packed.
      if (zero_ == 2) update_[i].grad_off = layout_.shard_size() + total;
      total += update_[i].n;
    }
  expert_saved_.assign(total, 0.f);
  if (zero_ == 2) grad_shard_.resize(layout_.shard_size() + total);
}

// Restores the expert gradients the dp reduction mixed up and sums them over ep_replica.
void DataParallel::reduce_expert_grads() {
  if (expert_ranges_.empty()) return;
  const bool replicas = ep_replica_ && ep_replica_->size() > 1;
  if (zero_ == 2) {
    float* g = grad_shard_.data() + layout_.shard_size();
    if (replicas)
      wait(ep_replica_->all_reduce(g, g, expert_saved_.size(), DType::f32, ReduceOp::sum));
    return;
  }
  if (replicas)
    wait(ep_replica_->all_reduce(expert_saved_.data(), expert_saved_.data(), expert_saved_.size(),
                                 DType::f32, ReduceOp::sum));
  size_t off = 0;
  for (auto [flat, n] : expert_ranges_) {
    std::memcpy(grads_.data() + flat, expert_saved_.data() + off, n * sizeof(float));
    off += n;
  }
}

DataParallel::~DataParallel() {
  for (int c = 0; c < model_.num_chunks(); ++c) model_.chunk(c).set_hooks(nullptr);
  // Never leave a collective writing into freed buffers.
  try {
    while (!inflight_.empty()) reclaim_oldest();
    release_params();
  } catch (...) {
  }
}

// ---- global view ----------------------------------------------------------------------

void DataParallel::load_params(const float* global) {
  if (zero_ < 3) {
    for (const FlatUnit& u : layout_.units())
      std::memcpy(params_.data() + u.flat, global + u.lo, (u.hi - u.lo) * sizeof(float));
  } else {
    for (const UpdatePiece& p : update_)
      std::memcpy(params_.data() + p.param_off, global + p.table_off, p.n * sizeof(float));
  }
  release_params();
}

void DataParallel::gather_params(float* global) {
  if (zero_ < 3) {
    for (const FlatUnit& u : layout_.units())
      std::memcpy(global + u.lo, params_.data() + u.flat, (u.hi - u.lo) * sizeof(float));
    return;
  }
  // Each element is owned by exactly one rank: a sum of one value and zeros is exact.
  const size_t total = model_.table().total();
  std::memset(global, 0, total * sizeof(float));
  for (const UpdatePiece& p : update_)
    std::memcpy(global + p.table_off, params_.data() + p.param_off, p.n * sizeof(float));
  wait(dp_->all_reduce(global, global, total, DType::f32, ReduceOp::sum));
}

void DataParallel::gather_dense(const float* dense, float* global) {
  const size_t total = model_.table().total();
  std::memset(global, 0, total * sizeof(float));
  // Experts after the sum: every rank holds all of its own, and other ranks' differ.
  for (bool experts : {false, true}) {
    size_t off = 0;
    for (size_t i = 0; i < update_.size(); ++i) {
      const UpdatePiece& p = update_[i];
      if (is_expert_piece(i) == experts)
        std::memcpy(global + p.table_off, dense + off, p.n * sizeof(float));
      off += p.n;
    }
    if (!experts && zero_ > 0 && size_ > 1)
      wait(dp_->all_reduce(global, global, total, DType::f32, ReduceOp::sum));
  }
}

void DataParallel::scatter_dense(const float* global, float* dense) const {
  size_t off = 0;
  for (const UpdatePiece& p : update_) {
    std::memcpy(dense + off, global + p.table_off, p.n * sizeof(float));
    off += p.n;
  }
}

void DataParallel::restore_model() {
  model_.restore_arenas();
  gather_params(model_.params().data());
  for (int c = 0; c < model_.num_chunks(); ++c) model_.chunk(c).set_hooks(nullptr);
}

// ---- one step -------------------------------------------------------------------------

void DataParallel::begin_step() {
  if (zero_ < 2)
    grads_.zero();
  else
    grad_shard_.zero();
}

void DataParallel::begin_microbatch(bool last, int chunk) {
  last_microbatch_.at(size_t(chunk)) = last;
}

void DataParallel::finish_gradients() {
  while (!inflight_.empty()) reclaim_oldest();
  reduce_expert_grads();
}

void DataParallel::read_grad(const ParamInfo& t, float* out) {
  const bool everything_here = zero_ == 0 || size_ == 1;
  if (!everything_here) std::memset(out, 0, t.numel * sizeof(float));
  const float* g = grad_storage();
  for (const UpdatePiece& p : update_)
    if (p.table_off >= t.offset && p.table_off < t.offset + t.numel)
      std::memcpy(out + (p.table_off - t.offset), g + p.grad_off, p.n * sizeof(float));
  if (!everything_here) wait(dp_->all_reduce(out, out, t.numel, DType::f32, ReduceOp::sum));
}

void DataParallel::write_grad(const ParamInfo& t, const float* in) {
  float* g = grad_storage();
  for (const UpdatePiece& p : update_)
    if (p.table_off >= t.offset && p.table_off < t.offset + t.numel)
      std::memcpy(g + p.grad_off, in + (p.table_off - t.offset), p.n * sizeof(float));
}

double DataParallel::grad_sum_squares(Communicator* tp) {
  // Stage 0 holds the reduced gradients everywhere; otherwise each rank adds its chunks.
  const float* g = grad_storage();
  double split = 0, replicated = 0, experts = 0;
  for (size_t i = 0; i < update_.size(); ++i) {
    const UpdatePiece& p = update_[i];
    (is_expert_piece(i)                     ? experts
     : update_param_[i]->shard.replicated() ? replicated
                                            : split) += sum_squares(g + p.grad_off, p.n);
  }
  if (!expert_ranges_.empty()) {
    // Each ep rank holds its experts in full, other ep ranks others (tp 1): add them over
    // ep; the rest is split over dp by ZeRO (stages 1-2) or whole everywhere (stage 0).
    const double rest = zero_ == 0 ? split + replicated : sum_over(split + replicated);
    return rest + (ep_ ? sum_in_rank_order(*ep_, experts) : experts);
  }
  if (!tp || tp->size() == 1) return zero_ == 0 ? split + replicated : sum_over(split + replicated);
  if (zero_ > 0) {
    split = sum_over(split);
    replicated = sum_over(replicated);
  }
  return sum_in_rank_order(*tp, split) + replicated;
}

void DataParallel::reduce_tp_partial_grads(Communicator* tp) {
  if (!tp || tp->size() == 1) return;
  float* g = grad_storage();
  std::vector<float> packed;
  for (size_t i = 0; i < update_.size(); ++i)
    if (update_param_[i]->tp_partial_grad)
      packed.insert(packed.end(), g + update_[i].grad_off, g + update_[i].grad_off + update_[i].n);
  if (packed.empty()) return;
  // Every tp rank of this dp index has the same table shape, hence the same pieces.
  wait(tp->all_reduce(packed.data(), packed.data(), packed.size(), DType::f32, ReduceOp::sum));
  size_t off = 0;
  for (size_t i = 0; i < update_.size(); ++i)
    if (update_param_[i]->tp_partial_grad) {
      std::memcpy(g + update_[i].grad_off, packed.data() + off, update_[i].n * sizeof(float));
      off += update_[i].n;
    }
}

void DataParallel::scale_grads(float s) {
  float* g = grad_storage();
  for (const UpdatePiece& p : update_) scale_inplace(g + p.grad_off, p.n, s);
}

void DataParallel::after_optimizer() {
  if ((zero_ == 1 || zero_ == 2) && size_ > 1) {
    // The gather would bring other ranks' experts into this rank's expert ranges: keep
    // this rank's (updated in full here) aside and put them back.
    size_t off = 0;
    for (auto [flat, n] : expert_ranges_) {
      std::memcpy(expert_saved_.data() + off, params_.data() + flat, n * sizeof(float));
      off += n;
    }
    std::vector<Work> works;
    for (const FlatBucket& b : layout_.buckets())
      works.push_back(dp_->all_gather(params_.data() + b.owned_lo(rank_),
                                      params_.data() + b.flat_lo, b.chunk, DType::f32));
    for (Work& w : works) wait(w);
    off = 0;
    for (auto [flat, n] : expert_ranges_) {
      std::memcpy(params_.data() + flat, expert_saved_.data() + off, n * sizeof(float));
      off += n;
    }
  }
  release_params();
}

void DataParallel::release_params() {
  if (zero_ < 3) return;
  auto reset = [&](GatherSlot& s) {
    wait(s.work);
    s.work = Work();
    s.unit = -1;
    s.in_use = false;
  };
  for (GatherSlot& s : edges_) reset(s);
  for (GatherSlot& s : slots_) reset(s);
}

double DataParallel::sum_over(double x) {
  const double t0 = now_seconds();
  const double s = sum_in_rank_order(*dp_, x);
  if (size_ > 1) exposed_ += now_seconds() - t0;
  return s;
}

double DataParallel::take_exposed_seconds() {
  const double e = exposed_;
  exposed_ = 0;
  return e;
}

DataParallelMemory DataParallel::memory() const {
  DataParallelMemory m;
  for (const GatherSlot& s : edges_) m.param_buffer_bytes += s.buf.bytes();
  for (const GatherSlot& s : slots_) m.param_buffer_bytes += s.buf.bytes();
  for (const Arena& a : pool_) m.grad_buffer_bytes += a.bytes();
  m.params_bytes = params_.bytes() + m.param_buffer_bytes;
  m.grads_bytes = grads_.bytes() + grad_shard_.bytes() + m.grad_buffer_bytes;
  return m;
}

// ---- communication helpers ------------------------------------------------------------

void DataParallel::wait(Work w) {
  if (w.test()) return;
  const double t0 = now_seconds();
  w.wait();
  exposed_ += now_seconds() - t0;
}

// Open MPI advances nonblocking collectives only inside MPI calls: testing the pending
// ones between layers keeps them moving while backward computes.
void DataParallel::poll() {
  for (InFlight& f : inflight_) f.work.test();
  if (zero_ == 3) {
    for (GatherSlot& s : edges_) s.work.test();
    for (GatherSlot& s : slots_) s.work.test();
  }
}

void DataParallel::bind(int unit) {
  const int c = unit_chunk_[size_t(unit)];
  model_.chunk(c).bind_unit(unit - unit_base_[size_t(c)], pbase_[unit], gbase_[unit]);
}

void DataParallel::launch(int k) {
  const FlatBucket& b = layout_.buckets()[k];
  bucket_done_[k] = 0;
  if (zero_ < 2) {
    if (size_ == 1) return;
    float* g = grads_.data() + b.flat_lo;
    // Expert parallelism: keep this bucket's local expert gradients (another dp rank's
    // same offsets hold other experts) for reduce_expert_grads.
    size_t off = 0;
    for (auto [flat, n] : expert_ranges_) {
      if (flat >= b.flat_lo && flat < b.flat_lo + b.size())
        std::memcpy(expert_saved_.data() + off, grads_.data() + flat, n * sizeof(float));
      off += n;
    }
    Work w = zero_ == 0 ? dp_->all_reduce(g, g, b.size(), DType::f32, ReduceOp::sum)
                        : dp_->reduce_scatter(g, grads_.data() + b.owned_lo(rank_), b.chunk,
                                              DType::f32, ReduceOp::sum);
    inflight_.push_back({k, -1, std::move(w)});
    return;
  }
  const int i = bucket_pool_[k];
  MT_CHECK(i >= 0, "bucket ", k, " launched without a gradient buffer");
  bucket_pool_[k] = -1;
  float* buf = pool_[i].data();
  // Expert parallelism: this microbatch's local expert gradients go to their own slot
  // after the shard before the reduce-scatter sums other ranks' experts into them.
  float* expert_grads = grad_shard_.data() + layout_.shard_size();
  size_t off = 0;
  for (auto [flat, n] : expert_ranges_) {
    if (flat >= b.flat_lo && flat < b.flat_hi)
      add_inplace(expert_grads + off, buf + (flat - b.flat_lo), n);
    off += n;
  }
  Work w;
  if (size_ > 1)
    w = dp_->reduce_scatter(buf, buf + size_t(rank_) * b.chunk, b.chunk, DType::f32, ReduceOp::sum);
  inflight_.push_back({k, i, std::move(w)});
}

void DataParallel::reclaim_oldest() {
  InFlight f = std::move(inflight_.front());
  inflight_.pop_front();
  wait(std::move(f.work));
  if (f.pool < 0) return;
  const FlatBucket& b = layout_.buckets()[f.bucket];
  add_inplace(grad_shard_.data() + b.shard_off, pool_[f.pool].data() + size_t(rank_) * b.chunk,
              b.chunk);
  pool_bucket_[f.pool] = -1;
}

int DataParallel::acquire_pool(int bucket) {
  const bool edge = edge_bucket_[size_t(bucket)];
  for (;;) {
    for (size_t i = edge ? 0 : 1; i < (edge ? 1 : pool_.size()); ++i)
      if (pool_bucket_[i] < 0) return int(i);
    MT_CHECK(!inflight_.empty(), "no free gradient bucket buffer");
    reclaim_oldest();
  }
}

// ---- hooks ----------------------------------------------------------------------------

void DataParallel::before_use(int unit, int next_unit) {
  poll();
  if (zero_ < 3) return;
  ensure_gathered(unit);
  pbase_[unit] = gathered(unit) - layout_.units()[unit].lo;
  bind(unit);
  // Prefetch: start the next unit's gather now so it arrives while this one computes.
  if (next_unit < 0) return;
  if (is_edge(next_unit)) {
    if (!find_slot(next_unit)) issue_gather(next_unit);
  } else if (!find_slot(next_unit)) {
    for (GatherSlot& s : slots_)
      if (!s.in_use) {
        issue_gather(next_unit);
        break;
      }
  }
}

void DataParallel::after_use(int unit) {
  // The buffer may be reused from now on; its contents stay valid until then, so the last
  // block's forward gather also serves its backward.
  if (zero_ == 3 && !is_edge(unit))
    if (GatherSlot* s = find_slot(unit)) s->in_use = false;
}

void DataParallel::before_grads(int unit) {
  poll();
  if (zero_ < 2) return;
  const FlatUnit& u = layout_.units()[unit];
  const int k = u.bucket;
  if (bucket_pool_[k] < 0) {
    const int i = acquire_pool(k);
    pool_bucket_[i] = k;
    bucket_pool_[k] = i;
    std::memset(pool_[i].data(), 0, layout_.buckets()[k].size() * sizeof(float));
  }
  gbase_[unit] = pool_[bucket_pool_[k]].data() + (u.flat - layout_.buckets()[k].flat_lo) - u.lo;
  bind(unit);
}

void DataParallel::grads_final(int unit) {
  // Stages 0-1 accumulate locally and reduce once, after the chunk's last microbatch.
  if (zero_ < 2 && !last_microbatch_[size_t(unit_chunk_[size_t(unit)])]) return;
  const int k = layout_.units()[unit].bucket;
  if (++bucket_done_[k] == int(layout_.buckets()[k].units.size())) launch(k);
}

// ---- ZeRO-3 gathers -------------------------------------------------------------------

DataParallel::GatherSlot* DataParallel::find_slot(int unit) {
  if (is_edge(unit)) {
    GatherSlot& e = edges_[size_t(unit_chunk_[size_t(unit)])];
    return e.unit == unit ? &e : nullptr;
  }
  for (GatherSlot& s : slots_)
    if (s.unit == unit) return &s;
  return nullptr;
}

DataParallel::GatherSlot* DataParallel::issue_gather(int unit) {
  GatherSlot* s = &edges_[size_t(unit_chunk_[size_t(unit)])];
  if (!is_edge(unit)) {
    s = nullptr;
    for (GatherSlot& c : slots_)
      if (!c.in_use && (!s || c.unit < 0)) s = &c;  // prefer an empty slot
    MT_CHECK(s != nullptr, "no free ZeRO-3 gather buffer for unit ", unit);
  }
  wait(std::move(s->work));  // the buffer must be idle before it is overwritten
  const FlatBucket& b = layout_.buckets()[layout_.units()[unit].bucket];
  s->unit = unit;
  s->work = size_ > 1
                ? dp_->all_gather(params_.data() + b.shard_off, s->buf.data(), b.chunk, DType::f32)
                : Work();
  if (size_ == 1) std::memcpy(s->buf.data(), params_.data() + b.shard_off, b.chunk * 4);
  return s;
}

void DataParallel::ensure_gathered(int unit) {
  GatherSlot* s = find_slot(unit);
  if (!s) s = issue_gather(unit);
  wait(std::move(s->work));
  s->work = Work();
  s->in_use = true;
}

float* DataParallel::gathered(int unit) {
  return find_slot(unit)->buf.data();
}

}  // namespace mt
