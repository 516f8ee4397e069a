#include "train/session.h"

#include "core/threads.h"
#include "data/cache_dir.h"
#include "model/precision.h"
#include "model/recompute.h"
#include "model/zigzag_layout.h"
#include "parallel/pipeline/pipeline_runner.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/stage_chunks.h"
#include "parallel/plain_runner.h"
#include "train/expert_grads_in_b.h"
#include "train/weights_file.h"

namespace mt {

namespace {

ParallelContext make_context(CommWorld& world, const ParallelOptions& p) {
  return make_parallel_context(world, p.mesh());
}

// This rank's dp slice of every global batch, in microbatches.
DataLoader make_loader(const std::string& path, const std::vector<std::string>& shards,
                       const TrainOptions& o, const ParallelContext& ctx, bool shuffle) {
  const ParallelOptions& p = o.parallel;
  // shards: a dataset's split (all its shards as one stream); empty: the one file `path`.
  DataLoader loader(shards.empty() ? std::vector<std::string>{path} : shards, o.optim.batch,
                    o.model.seq, p.dp, ctx.coord.dp, p.microbatches);
  loader.require_vocab(o.model.vocab);
  if (shuffle) loader.shuffle_samples(o.optim.seed, meshtrain_cache_dir() + "/sample_index");
  // The cp ranks of a dp rank read its sequences and keep their zigzag rows of them.
  if (p.cp > 1) loader.shard_sequences(zigzag_positions(o.model.seq, p.cp, ctx.coord.cp));
  return loader;
}

std::optional<DataLoader> make_val_loader(const TrainOptions& o, const ParallelContext& ctx) {
  // Only a run that evaluates reads it (its rules are checked before the ranks start then).
  if (o.io.val_data.empty() || o.optim.eval_every <= 0) return std::nullopt;
  return make_loader(o.io.val_data, o.io.val_shards, o, ctx, false);
}

// The model chunks this rank holds: the whole model, or its pipeline stage's chunks.
std::vector<ChunkSpec> chunk_specs(const TrainOptions& o, const ParallelContext& ctx) {
  const ParallelOptions& p = o.parallel;
  if (p.pp == 1) return GPT::whole_model(o.model);
  const int v = chunks_per_stage(p.schedule, p.virtual_stages);
  return stage_chunk_specs(resolve_stage_layers(o.model, p.pp, v, p.stage_layers), p.pp,
                           ctx.coord.pp, placement_of(p.schedule));
}

TensorParallelShard tp_shard(const TrainOptions& o, const ParallelContext& ctx) {
  const bool sp = o.parallel.sequence_parallel && o.parallel.tp > 1;
  return TensorParallelShard{ctx.coord.tp, o.parallel.tp,
                             o.parallel.tp > 1 ? ctx.tp.get() : nullptr, sp};
}

// The model a rank builds: under context parallelism its blocks run seq / cp rows of each
// sequence (the RoPE table and the learned position table still cover all seq positions:
// model_chunk.h).
ModelConfig rank_model(const TrainOptions& o) {
  return cp_rank_model(o.model, o.parallel.cp);
}

ContextParallelShard cp_shard(const TrainOptions& o, const ParallelContext& ctx) {
  const ParallelOptions& p = o.parallel;
  if (p.cp == 1) return {};
  return ContextParallelShard{ctx.coord.cp, p.cp, ctx.cp.get(), p.cp_comm};
}

std::unique_ptr<TokenDispatcher> make_dispatcher(const ParallelOptions& p,
                                                 const ParallelContext& ctx) {
  if (p.ep == 1) return nullptr;
  return std::make_unique<TokenDispatcher>(ctx.ep);
}

// Initial weights: --init-from's, else drawn from the seed (the same model in every
// layout). Data parallelism takes the model over with them.
GPT& with_initial_weights(GPT& model, const TrainOptions& o) {
  if (!o.io.init_from.empty()) {
    import_weights(o.io.init_from, model);
    import_router_biases(o.io.init_from, model.moe_layers(), o.model);  // llama: §9's names
  } else {
    model.init(o.optim.seed);
  }
  return model;
}

// Each of the dp x microbatches groups contributes its aux loss gradient with weight 1/G,
// so the differentiated aux term is the reported mean over groups (docs/moe.md).
std::vector<MoeLayer*> moe_layers(GPT& model, const ParallelOptions& p) {
  std::vector<MoeLayer*> moe = model.moe_layers();
  for (MoeLayer* m : moe) m->set_aux_grad_scale(1.0f / float(p.dp * p.microbatches));
  return moe;
}

AdamW make_optimizer(const OptimOptions& t, const DataParallel& dp) {
  std::vector<OptimPiece> pieces;
  for (const UpdatePiece& p : dp.update_pieces())
    pieces.push_back({p.table_off, p.param_off, p.grad_off, p.n, p.decay});
  return AdamW(AdamWConfig{t.beta1, t.beta2, t.eps, t.weight_decay}, std::move(pieces));
}

std::unique_ptr<MicrobatchRunner> make_runner(const TrainOptions& o, const ParallelContext& ctx,
                                              GPT& model, DataParallel& dp, int b) {
  const ParallelOptions& p = o.parallel;
  // Under cp a microbatch is this rank's zigzag rows of b sequences; the pipeline's stages
  // pass them on between ranks of the same cp index.
  const int rows = o.model.seq / p.cp;
  if (p.pp == 1) return std::make_unique<PlainRunner>(model, p.microbatches, b, rows);
  const bool sp = p.sequence_parallel && p.tp > 1;
  return std::make_unique<PipelineRunner>(
      model, dp, ctx, make_schedule(p.schedule, p.pp, p.microbatches, p.virtual_stages),
      PipelineShape{b, rows, o.model.dim, sp ? p.tp : 1});
}

}  // namespace

Session::Session(const TrainOptions& o, CommWorld& world, const RunInfo& run)
    : opts(o),
      info(run),
      ctx(make_context(world, o.parallel)),
      train(
          make_loader(o.io.data, o.io.data_shards, o, ctx, o.io.data_order == DataOrder::shuffled)),
      val(make_val_loader(o, ctx)),
      dispatcher(make_dispatcher(o.parallel, ctx)),
      model(rank_model(o), chunk_specs(o, ctx), tp_shard(o, ctx), train.micro_batch_size(),
            ExpertParallelShard{.rank = ctx.coord.ep_rank,
                                .size = o.parallel.ep,
                                .exchange = dispatcher.get(),
                                .overlap_parts = o.parallel.moe_overlap_parts,
                                .expert_grads_in_b = expert_grads_in_b(o.parallel)},
            o.optim.recompute, o.optim.precision, cp_shard(o, ctx)),
      // Gradients are partial sums over the batch (dp) and over the sequence (cp): the
      // replicas are the dp_cp group (ctx.dp itself without cp).
      dp(with_initial_weights(model, o),
         DataParallelOptions{ctx.dp_cp, o.parallel.zero, o.parallel.bucket_mb, ctx.ep,
                             ctx.ep_replica, ctx.cp, ctx.dp}),
      moe(moe_layers(model, o.parallel)),
      moe_metrics(o.model, moe, ctx.dp.get(), o.parallel.pp > 1 ? ctx.pp.get() : nullptr),
      opt(make_optimizer(o.optim, dp)),
      bf16_copies(model, dp.param_storage(), dp.param_storage_floats(), o.parallel.zero, opt),
      runner(make_runner(o, ctx, model, dp, train.micro_batch_size())),
      lr{o.optim.lr_schedule, o.optim.lr, o.optim.min_lr, o.optim.warmup, o.optim.steps},
      replica_sync(o.parallel.dp_sync, o.parallel.outer_lr, o.parallel.outer_momentum,
                   o.optim.steps) {
  // --dropout: microbatch j of this dp rank holds sequences dp*B/dp_size + j*b.. of the batch.
  model.set_dropout(o.optim.seed, int64_t(ctx.coord.dp) * (o.optim.batch / o.parallel.dp));
  // Checkpoints, exports and the sample hold the global view: assemble it (collective).
  if (!o.io.save.empty() || !o.io.export_path.empty() || !o.io.export_hf.empty() ||
      o.io.sample_tokens > 0)
    view.emplace(o.model, model.table(), moe, *ctx.world);
}

double Session::peak_flops() const {
  if (!info.peak) return 0;
  return info.peak->read().gflops_per_thread * 1e9 * opts.optim.threads * ctx.world_size;
}

std::unique_ptr<Session> build_session(const TrainOptions& opts, CommWorld& world,
                                       const RunInfo& info) {
  set_compute_threads(opts.optim.threads);
  return std::make_unique<Session>(opts, world, info);
}

}  // namespace mt
