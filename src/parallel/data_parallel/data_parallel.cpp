#include "parallel/data_parallel/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <vector>

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

// Stages 0-2 hold the flat parameters, stage 3 its shard of them and, under expert
// parallelism, this rank's experts whole after it (expert_floats).
size_t param_floats(const FlatLayout& layout, int zero, size_t expert_floats) {
  return zero == 3 ? layout.shard_size() + expert_floats : layout.flat_size();
}

bool expert_parallel(const DataParallelOptions& o) {
  return o.ep && o.ep->size() > 1;
}

// The pieces this rank updates: its own chunks (every element at stage 0), in table order.
// Under expert parallelism the experts follow, whole (the same flat offsets hold other
// experts on the other ranks of the ep group), with their flat offsets for now: the
// constructor packs their gradients (stages 2-3) and parameters (stage 3) after the shard.
std::vector<UpdatePiece> pieces_to_update(const FlatLayout& layout, const ParamTable& table,
                                          int zero, bool experts_apart) {
  std::vector<UpdatePiece> update;
  for (bool experts : {false, true}) {
    if (experts && !experts_apart) break;
    for (const FlatPiece& p : layout.pieces(/*owned_only=*/zero > 0 && !experts)) {
      if (experts_apart && is_expert_param(table.at_offset(p.table_off).name) != experts) continue;
      const size_t param = zero == 3 && !experts ? p.shard_off : p.flat_off;
      update.push_back({p.table_off, param, zero >= 2 ? p.shard_off : p.flat_off, p.n, p.decay});
    }
  }
  return update;
}

std::vector<const ParamInfo*> piece_tensors(const ParamTable& table,
                                            const std::vector<UpdatePiece>& update) {
  std::vector<const ParamInfo*> t;
  for (const UpdatePiece& p : update) t.push_back(&table.at_offset(p.table_off));
  return t;
}

size_t first_expert(const std::vector<const ParamInfo*>& tensors, bool experts_apart) {
  size_t i = 0;
  while (i < tensors.size() && !(experts_apart && is_expert_param(tensors[i]->name))) ++i;
  return i;
}

std::vector<std::pair<size_t, size_t>> expert_flat_ranges(const std::vector<UpdatePiece>& update,
                                                          size_t first) {
  std::vector<std::pair<size_t, size_t>> r;
  for (size_t i = first; i < update.size(); ++i) r.push_back({update[i].param_off, update[i].n});
  return r;
}

// Each update piece's (offset, n) in the gradient storage.
std::vector<std::pair<size_t, size_t>> grad_spans(const std::vector<UpdatePiece>& update) {
  std::vector<std::pair<size_t, size_t>> r;
  for (const UpdatePiece& p : update) r.push_back({p.grad_off, p.n});
  return r;
}

}  // namespace

// Forwards one chunk's hooks to the engine with the chunk's units renumbered globally: unit
// 0 is its edge chunk's edge unit (GPT::edge_chunk: itself, or the embedding chunk's for a
// tied head in another chunk of this rank), unit u > 0 is base + u.
class DataParallel::ChunkAdapter final : public ChunkHooks {
 public:
  ChunkAdapter(DataParallel& dp, int base, int edge) : dp_(dp), base_(base), edge_(edge) {}
  void before_use(int unit, int next) override {
    dp_.before_use(global(unit), next < 0 ? -1 : global(next));
  }
  void after_use(int unit) override { dp_.after_use(global(unit)); }
  void before_grads(int unit) override { dp_.before_grads(global(unit)); }
  void grads_final(int unit) override { dp_.grads_final(global(unit)); }

 private:
  int global(int unit) const { return unit == 0 ? edge_ : base_ + unit; }
  DataParallel& dp_;
  int base_, edge_;
};

namespace {

// Which (chunk, chunk unit) pairs each global unit is bound to: its own, and a shared edge
// unit also the unit 0 of every chunk whose edge it holds (GPT::edge_chunk).
std::vector<std::vector<std::pair<int, int>>> unit_users(GPT& m, const FlatLayout& layout) {
  std::vector<std::vector<std::pair<int, int>>> users(layout.units().size());
  for (int c = 0; c < m.num_chunks(); ++c)
    for (int u = 0; u < m.chunk(c).num_units(); ++u) {
      const int owner = u == 0 ? layout.first_unit(m.edge_chunk(c)) : layout.first_unit(c) + u;
      users[size_t(owner)].push_back({c, u});
    }
  return users;
}

// Backward passes per microbatch of each global unit: one per chunk using it.
std::vector<int> passes_per_microbatch(const std::vector<std::vector<std::pair<int, int>>>& users) {
  std::vector<int> n;
  for (const auto& u : users) n.push_back(std::max(1, int(u.size())));
  return n;
}

}  // namespace

DataParallel::DataParallel(GPT& model, DataParallelOptions o)
    : model_(model),
      dp_(std::move(o.dp)),
      cp_(std::move(o.cp)),
      replicas_(std::move(o.replicas)),
      zero_(o.zero),
      rank_(dp_->rank()),
      size_(dp_->size()),
      layout_(flat_layout(model.table(), unit_ranges(model), units_per_chunk(model), size_, rank_,
                          zero_, o.bucket_mb, expert_parallel(o))),
      update_(pieces_to_update(layout_, model.table(), zero_, expert_parallel(o))),
      update_param_(piece_tensors(model.table(), update_)),
      first_expert_(first_expert(update_param_, expert_parallel(o))),
      experts_(expert_parallel(o) ? ExpertRanges(expert_flat_ranges(update_, first_expert_),
                                                 std::move(o.ep), std::move(o.ep_replica))
                                  : ExpertRanges()),
      params_(param_floats(layout_, zero_, experts_.floats())),
      users_(unit_users(model, layout_)),
      grads_(layout_, *dp_, zero_, experts_, exposed_, passes_per_microbatch(users_)) {
  MT_CHECK(zero_ >= 0 && zero_ <= 3);
  // Stages 2-3: the experts' gradients live after the shard, packed; stage 3: their
  // parameters too, whole, laid over every gather of their unit (this rank's experts, not
  // the dp group's mix at their flat offsets).
  size_t packed = 0;
  std::vector<ParamGathers::Overlay> overlays;
  for (size_t i = first_expert_; i < update_.size(); ++i) {
    const size_t at = layout_.shard_size() + packed;
    if (zero_ >= 2) update_[i].grad_off = at;
    if (zero_ == 3) {
      overlays.push_back({update_[i].param_off, update_[i].n, params_.data() + at});
      update_[i].param_off = at;
    }
    packed += update_[i].n;
  }
  // After the experts' gradients moved behind the shard (stages 2-3).
  squares_ = PieceSquares(PieceSquares::in_buckets(
      layout_, grad_spans(update_), o.squares_while_waiting && zero_ <= 1 && experts_.empty()));
  if (zero_ == 3)
    gathers_ = std::make_unique<ParamGathers>(layout_, *dp_, params_.data(), exposed_,
                                              std::move(overlays));
  load_params(model.params().data());
  model.release_arenas();
  const size_t nu = layout_.units().size();
  pbase_.assign(nu, nullptr);
  gbase_.assign(nu, nullptr);
  for (size_t u = 0; u < nu; ++u) {
    const FlatUnit& fu = layout_.units()[u];
    // Stage 3 binds parameters when a unit is gathered; until then both point at the
    // unit's own flat position or, lacking one, at a gradient buffer (never read then).
    if (zero_ < 3) pbase_[u] = params_.data() + fu.flat - fu.lo;
    if (zero_ < 2) gbase_[u] = grad_storage() + fu.flat - fu.lo;
    // Any live buffer will do for a binding never read; the pool is empty when every
    // bucket reduces in place (DualPipe-V's shared edge unit at ZeRO 3 met that).
    float* spare = grads_.scratch() ? grads_.scratch() : params_.data();
    if (!pbase_[u]) pbase_[u] = gbase_[u] ? gbase_[u] : spare - fu.lo;
    if (!gbase_[u]) gbase_[u] = pbase_[u];
    bind(int(u));
  }
  for (int c = 0; c < model.num_chunks(); ++c) {
    adapters_.push_back(std::make_unique<ChunkAdapter>(*this, layout_.first_unit(c),
                                                       layout_.first_unit(model.edge_chunk(c))));
    model.chunk(c).set_hooks(adapters_.back().get());
  }
}

FlatLayout DataParallel::flat_layout(const ParamTable& table,
                                     const std::vector<std::pair<size_t, size_t>>& unit_ranges,
                                     const std::vector<int>& units_per_chunk, int dp, int dp_rank,
                                     int zero, double bucket_mb, bool experts_apart) {
  // ZeRO-3 gathers unit by unit (each unit a bucket); ZeRO 0-2 keep the reduction's tail
  // short (FlatLayout::kBlockBuckets). ZeRO 1-2 under ep: the buckets decide ownership and ep
  // keeps experts whole, so a bucket holds whole blocks for every rank (whole_blocks = dp).
  return FlatLayout(table, unit_ranges, dp, dp_rank, bucket_floats(bucket_mb), zero == 3,
                    units_per_chunk, zero <= 2 ? FlatLayout::kBlockBuckets : 1,
                    zero >= 1 && zero <= 2 && experts_apart ? dp : 1);
}

DataParallelMemory DataParallel::memory_of(
    const std::vector<std::pair<size_t, size_t>>& unit_ranges,
    const std::vector<int>& units_per_chunk, int dp, int zero, double bucket_mb,
    size_t expert_floats, bool experts_apart) {
  // The sizes read no tensor of the table (only FlatLayout::pieces would), and they are
  // the same on every dp rank.
  const ParamTable no_tensors;
  const FlatLayout layout =
      flat_layout(no_tensors, unit_ranges, units_per_chunk, dp, 0, zero, bucket_mb, experts_apart);
  const GradBuckets::Sizes grads = GradBuckets::sizes(layout, zero, expert_floats);
  DataParallelMemory m;
  for (size_t n : grads.pool) m.grad_buffer_bytes += n * sizeof(float);
  if (zero == 3)
    for (size_t n : ParamGathers::buffer_floats(layout)) m.param_buffer_bytes += n * sizeof(float);
  m.params_bytes = param_floats(layout, zero, expert_floats) * sizeof(float) + m.param_buffer_bytes;
  m.grads_bytes = grads.storage * sizeof(float) + m.grad_buffer_bytes;
  m.expert_copy_bytes = expert_floats * sizeof(float);
  return m;
}

DataParallel::~DataParallel() {
  for (int c = 0; c < model_.num_chunks(); ++c) model_.chunk(c).set_hooks(nullptr);
  // The members wait for their collectives in flight before freeing their buffers.
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
  // Experts after the sum: every rank holds all of its own, and other ranks' differ.
  const size_t total = model_.table().total();
  std::memset(global, 0, total * sizeof(float));
  for (bool experts : {false, true}) {
    for (size_t i = 0; i < update_.size(); ++i) {
      const UpdatePiece& p = update_[i];
      if (is_expert_piece(i) == experts)
        std::memcpy(global + p.table_off, params_.data() + p.param_off, p.n * sizeof(float));
    }
    if (!experts) exposed_.wait(dp_->all_reduce(global, global, total, DType::f32, ReduceOp::sum));
  }
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
      exposed_.wait(dp_->all_reduce(global, global, total, DType::f32, ReduceOp::sum));
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

void DataParallel::begin_step(int microbatches) {
  grads_.begin_step(microbatches);
  squares_.begin_step();
}

void DataParallel::finish_gradients() {
  calls_at_gradient_wait_ = dp_->stats().calls;
  grads_.finish([this] { return squares_.square_next(grads_.storage(), grads_.reduced()); });
}

void DataParallel::read_grad(const ParamInfo& t, float* out) {
  const bool everything_here = zero_ == 0 || size_ == 1;
  if (!everything_here) std::memset(out, 0, t.numel * sizeof(float));
  const float* g = grad_storage();
  for (const UpdatePiece& p : update_)
    if (p.table_off >= t.offset && p.table_off < t.offset + t.numel)
      std::memcpy(out + (p.table_off - t.offset), g + p.grad_off, p.n * sizeof(float));
  if (!everything_here)
    exposed_.wait(dp_->all_reduce(out, out, t.numel, DType::f32, ReduceOp::sum));
}

void DataParallel::write_grad(const ParamInfo& t, const float* in) {
  float* g = grad_storage();
  for (size_t i = 0; i < update_.size(); ++i) {
    const UpdatePiece& p = update_[i];
    if (p.table_off < t.offset || p.table_off >= t.offset + t.numel) continue;
    std::memcpy(g + p.grad_off, in + (p.table_off - t.offset), p.n * sizeof(float));
    squares_.forget(i);
  }
}

LocalGradSquares DataParallel::local_grad_squares() {
  // Stage 0 holds the reduced gradients everywhere; otherwise each rank adds its chunks.
  // In piece order, whenever each piece's sum was taken (piece_squares.h).
  const std::vector<double>& sq = squares_.sums(grads_.storage());
  LocalGradSquares s;
  for (size_t i = 0; i < update_.size(); ++i)
    (is_expert_piece(i)                     ? s.experts
     : update_param_[i]->shard.replicated() ? s.replicated
                                            : s.split) += sq[i];
  return s;
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
  exposed_.wait(
      tp->all_reduce(packed.data(), packed.data(), packed.size(), DType::f32, ReduceOp::sum));
  size_t off = 0;
  for (size_t i = 0; i < update_.size(); ++i)
    if (update_param_[i]->tp_partial_grad) {
      std::memcpy(g + update_[i].grad_off, packed.data() + off, update_[i].n * sizeof(float));
      off += update_[i].n;
      squares_.forget(i);
    }
}

void DataParallel::scale_grads(float s) {
  float* g = grad_storage();
  for (const UpdatePiece& p : update_) scale_inplace(g + p.grad_off, p.n, s);
  squares_.forget_all();
}

void DataParallel::after_optimizer() {
  if ((zero_ == 1 || zero_ == 2) && size_ > 1) {
    // The gather would bring other ranks' experts into this rank's expert ranges: keep
    // this rank's (updated in full here) aside and put them back.
    experts_.keep_params(params_.data());
    std::vector<Work> works;
    for (const FlatBucket& b : layout_.buckets())
      works.push_back(dp_->all_gather(params_.data() + b.owned_lo(rank_),
                                      params_.data() + b.flat_lo, b.chunk, DType::f32));
    for (Work& w : works) exposed_.wait(w);
    experts_.restore_params(params_.data());
  }
  release_params();
}

void DataParallel::release_params() {
  if (gathers_) gathers_->drop_all();
}

double DataParallel::sum_over(double x) {
  const double t0 = now_seconds();
  const double s = sum_in_rank_order(*dp_, x);
  if (size_ > 1) exposed_.add(now_seconds() - t0);
  return s;
}

double DataParallel::finish_sum(RankOrderSum& sum) {
  if (size_ > 1) exposed_.wait(sum.work());
  return sum.finish();
}

DataParallelMemory DataParallel::memory() const {
  DataParallelMemory m;
  m.param_buffer_bytes = gathers_ ? gathers_->bytes() : 0;
  m.grad_buffer_bytes = grads_.buffer_bytes();
  m.params_bytes = params_.bytes() + m.param_buffer_bytes;
  m.grads_bytes = grads_.bytes();
  m.expert_copy_bytes = experts_.floats() * sizeof(float);
  return m;
}

// ---- hooks ----------------------------------------------------------------------------

// Open MPI advances nonblocking collectives only inside MPI calls: testing the pending
// ones between layers keeps them moving while backward computes.
void DataParallel::poll() {
  grads_.poll();
  if (gathers_) gathers_->poll();
}

void DataParallel::bind(int unit) {
  for (auto [c, u] : users_[size_t(unit)])
    model_.chunk(c).bind_unit(u, pbase_[size_t(unit)], gbase_[size_t(unit)]);
}

void DataParallel::before_use(int unit, int next_unit) {
  poll();
  if (!gathers_) return;
  pbase_[size_t(unit)] = gathers_->use(unit, next_unit) - layout_.units()[size_t(unit)].lo;
  bind(unit);
}

void DataParallel::after_use(int unit) {
  if (gathers_) gathers_->release(unit);
}

void DataParallel::before_grads(int unit) {
  poll();
  float* g = grads_.before_grads(unit);
  if (!g) return;
  gbase_[size_t(unit)] = g - layout_.units()[size_t(unit)].lo;
  bind(unit);
}

void DataParallel::grads_final(int unit) {
  grads_.grads_final(unit);
}

}  // namespace mt
