#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "comm/fault.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "kernels/reduce.h"
#include "model/gpt.h"
#include "model/sampler.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/expert_parallel/router_balance.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/grad_norm.h"
#include "parallel/parallel_context.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/stage_chunks.h"
#include "parallel/pipeline/tied_embedding.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/global_view.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/moe_metrics.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/tokenizer.h"
#include "train/trace.h"

namespace mt {

namespace {

// Mean cross-entropy over `batches` global batches of `loader` (from its start). Under a
// pipeline (pipe, pp non-null) the stages run the forwards; the last stage's sum is summed
// over pp so that every rank returns the same value.
double evaluate(GPT& model, DataLoader& loader, int batches, DataParallel& dp,
                PipelineExecutor* pipe = nullptr, Communicator* pp = nullptr) {
  loader.reset();
  const int b = loader.micro_batch_size(), T = loader.seq_len();
  double sum = 0;
  for (int k = 0; k < batches; ++k) {
    loader.next_batch();
    if (pipe) {
      sum += pipe->evaluate(loader.inputs(0), loader.targets(0));
      continue;
    }
    for (int j = 0; j < loader.microbatches(); ++j)
      sum += model.eval_microbatch(loader.inputs(j), loader.targets(j), b, T);
  }
  double total = dp.sum_over(sum);
  if (pp) total = sum_in_rank_order(*pp, total);
  dp.release_params();
  return total / (double(batches) * loader.tokens_per_batch());
}

// model: a whole, unsharded model (one worker's layout).
void print_sample(GPT& model, const TrainOptions& o, Progress& progress) {
  if (model.config().vocab > ByteTokenizer::kVocabSize) {
    progress.line("(sample skipped: the model's vocabulary is not byte-level)");
    return;
  }
  SampleOptions so;
  so.tokens = o.io.sample_tokens;
  so.seed = o.optim.seed;
  auto prompt = ByteTokenizer::encode(o.io.sample_prompt);
  auto out = sample(model, prompt, so);
  std::vector<int> generated(out.begin() + long(prompt.size()), out.end());
  progress.line("---- sample (" + std::to_string(so.tokens) + " tokens, temperature 0.8) ----");
  progress.line(o.io.sample_prompt + ByteTokenizer::decode(generated));
  progress.line("----");
}

}  // namespace

TrainSummary train_rank(const TrainOptions& o, CommWorld& world, const RunInfo& info) {
  const ParallelOptions& par = o.parallel;
  // Mixture of experts: what the trainer composes with so far (docs/moe.md, "Integration").
  if (par.ep > 1) {
    // Expert parallelism: the experts' gradients take their own reduction and are updated
    // in full by their owners (ZeRO 0-2).
    MT_REQUIRE(par.zero <= 2, "--ep ", par.ep,
               " supports --zero 0, 1 or 2 (got --zero 3: its parameter gathers over dp "
               "would mix different ranks' experts)");
  }
  if (o.model.experts > 0) {
    MT_REQUIRE(par.tp == 1, "--experts needs --tp 1 for now (got --tp ", par.tp, ")");
  }
  ParallelContext ctx = make_parallel_context(world, MeshShape{par.pp, par.dp, par.tp, par.ep});
  set_compute_threads(o.optim.threads);
  const bool lead = world.rank() == 0;
  const FaultSpec fault = fault_spec_from_env();

  const ModelConfig& cfg = o.model;
  const int B = o.optim.batch, T = cfg.seq, M = par.microbatches;
  DataLoader train(o.io.data, B, T, par.dp, ctx.coord.dp, M);
  train.require_vocab(cfg.vocab);
  std::optional<DataLoader> val;
  if (!o.io.val_data.empty()) {
    val.emplace(o.io.val_data, B, T, par.dp, ctx.coord.dp, M);
    val->require_vocab(cfg.vocab);
  }
  const int b = train.micro_batch_size();

  const bool sp = par.sequence_parallel && par.tp > 1;
  Communicator* tp_comm = par.tp > 1 ? ctx.tp.get() : nullptr;
  std::vector<ChunkSpec> chunks = GPT::whole_model(cfg);
  if (par.pp > 1)
    chunks =
        stage_chunk_specs(resolve_stage_layers(cfg, par.pp, par.virtual_stages, par.stage_layers),
                          par.pp, ctx.coord.pp);
  // One token exchange per rank, shared by every MoE layer (one exchange in flight at a time).
  std::unique_ptr<TokenDispatcher> dispatcher;
  if (par.ep > 1) dispatcher = std::make_unique<TokenDispatcher>(ctx.ep);
  GPT model(cfg, chunks, TensorParallelShard{ctx.coord.tp, par.tp, tp_comm, sp}, b,
            ExpertParallelShard{ctx.coord.ep_rank, par.ep, dispatcher.get()});
  if (!o.io.init_from.empty())
    import_weights(o.io.init_from, model);
  else
    model.init(o.optim.seed);
  DataParallel dp(model, {ctx.dp, par.zero, par.bucket_mb, ctx.ep, ctx.ep_replica});
  // Each of the dp x microbatches groups contributes its aux loss gradient with weight 1/G,
  // so the differentiated aux term is the reported mean over groups (docs/moe.md).
  const std::vector<MoeLayer*> moe = model.moe_layers();
  for (MoeLayer* m : moe) m->set_aux_grad_scale(1.0f / float(par.dp * M));
  // Routing metrics of the whole model: summed over dp, gathered from the stages over pp.
  MoeMetrics moe_metrics(cfg, moe, ctx.dp.get(), par.pp > 1 ? ctx.pp.get() : nullptr);
  AdamWConfig acfg{o.optim.beta1, o.optim.beta2, o.optim.eps, o.optim.weight_decay};
  std::vector<OptimPiece> pieces;
  for (const UpdatePiece& p : dp.update_pieces())
    pieces.push_back({p.table_off, p.param_off, p.grad_off, p.n, p.decay});
  AdamW opt(acfg, std::move(pieces));
  const ParamTable& table = model.table();

  // Pipeline: this stage's schedule runs every microbatch; only the last stage has a loss.
  std::unique_ptr<PipelineExecutor> pipe;
  double bubble_theory = 0, bubble_sum = 0;
  if (par.pp > 1) {
    std::vector<ModelChunk*> mine;
    for (int c = 0; c < model.num_chunks(); ++c) mine.push_back(&model.chunk(c));
    Schedule s = make_schedule(par.schedule, par.pp, M, par.virtual_stages);
    bubble_theory = theoretical_bubble(s);
    pipe = std::make_unique<PipelineExecutor>(std::move(s), ctx.coord.pp, mine, *ctx.pp,
                                              PipelineShape{b, T, cfg.dim, sp ? par.tp : 1});
  }
  const bool tied_here = pipe && (ctx.first_stage() || ctx.last_stage());

  // Checkpoints hold the global view: assemble it (collective) before writing, and
  // distribute it after reading, so any layout can load what any other one saved.
  // Gathered over dp first (this rank's tensors, table layout), then over tp (global tensors),
  // then from the stages and expert owners to rank 0 (train/global_view.h).
  std::optional<GlobalView> view;
  if (!o.io.save.empty() || !o.io.export_path.empty() || o.io.sample_tokens > 0)
    view.emplace(cfg, table, moe, *ctx.world);
  auto save = [&](int step) {
    GlobalTensors gp, gm, gv;
    {
      std::vector<float> buf(table.total());
      dp.gather_params(buf.data());
      gp = view->to_lead(assemble_global(table, buf.data(), tp_comm));
      dp.gather_dense(opt.exp_avg().data(), buf.data());
      gm = view->to_lead(assemble_global(table, buf.data(), tp_comm));
      dp.gather_dense(opt.exp_avg_sq().data(), buf.data());
      gv = view->to_lead(assemble_global(table, buf.data(), tp_comm));
    }
    const std::vector<NamedTensor> biases = view->router_biases_to_lead();
    if (lead)
      save_checkpoint(o.io.save, view->whole(), cfg, gp, gm, gv,
                      {step, train.position(), o.optim.seed}, biases);
    ctx.world->barrier().wait();  // the directory is complete when every rank goes on
  };

  int start = 0;
  if (!o.io.load.empty()) {
    std::vector<float> p(table.total()), m(table.total()), v(table.total());
    TrainState st = load_checkpoint(o.io.load, table, {p.data(), m.data(), v.data()});
    MT_REQUIRE(st.step <= o.optim.steps, "--load ", o.io.load, " is at step ", st.step,
               ", beyond --steps ", o.optim.steps);
    dp.load_params(p.data());
    dp.scatter_dense(m.data(), opt.exp_avg().data());
    dp.scatter_dense(v.data(), opt.exp_avg_sq().data());
    load_router_biases(o.io.load, table, moe);
    start = st.step;
    train.set_position(st.data_position);
  }

  LrSchedule sched{o.optim.lr_schedule, o.optim.lr, o.optim.min_lr, o.optim.warmup, o.optim.steps};
  MetricsWriter metrics(lead ? o.io.metrics : "");
  Progress progress(!lead || o.io.quiet);
  Trace trace(!o.io.trace.empty(), world.rank(), info.t0);
  auto print_moe_summary = [&](int step) {
    for (const std::string& line : moe_metrics.summary(step)) progress.line(line);
  };
  if (lead)
    progress.line(str("meshtrain: ", cfg.describe(), " | dp ", par.dp, " | tp ", par.tp,
                      sp ? " (sequence parallel)" : "", " | pp ", par.pp,
                      par.pp > 1 ? " (" + par.schedule + ")" : "", " | batch ", B, "x", T, " | ", M,
                      " microbatch(es) | ", o.optim.steps, " steps | backend ",
                      world.backend_name()));

  const float dloss = float(1.0 / (double(B) * T));  // mean over the global batch
  const double peak = info.peak_gflops_per_thread * 1e9 * o.optim.threads * world.size();
  TrainSummary summary;

  for (int u = start; u < o.optim.steps; ++u) {
    const int step = u + 1;
    maybe_inject_fault(fault, world.rank(), step, world);
    Stopwatch sw;
    const double t_step = now_seconds();
    const double lr = sched.at(u);
    train.next_batch();
    const CommStats dp0 = ctx.dp->stats(), tp0 = ctx.tp->stats();
    dp.begin_step(M);
    moe_metrics.begin_step();
    double loss_sum = 0;
    PipelineStepStats ps;
    if (pipe) {
      PipelineEventSink sink;
      if (trace.enabled())
        sink = [&](const std::string& name, const char* cat, double begin, double end) {
          trace.add(name, cat, begin, end);
        };
      ps = pipe->run(train.inputs(0), train.targets(0), dloss, sink);
      loss_sum = ps.loss_sum;
    } else {
      for (int j = 0; j < M; ++j) {
        Trace::Span span(trace, "F+B mb" + std::to_string(j), "compute");
        loss_sum += model.train_microbatch(train.inputs(j), train.targets(j), b, T, dloss);
      }
    }
    std::vector<float> tied_grad;  // the tied wte's full gradient, summed over both stages
    {
      Trace::Span span(trace, "wait grad buckets", "comm");
      dp.finish_gradients();
      // LayerNorm gradients under sequence parallelism cover this rank's rows only.
      if (sp) dp.reduce_tp_partial_grads(tp_comm);
      // Both copies of the tied wte get the sum of the embedding's and the head's parts.
      if (tied_here) sum_tied_embedding_grad(*ctx.pp, dp, table, tied_grad);
    }
    double loss = dp.sum_over(loss_sum) / (double(B) * T);
    // Each parameter counted once (the last stage's wte is a copy of the first stage's).
    const double sq = global_grad_sum_squares(dp, {tp_comm, ctx.pp.get()},
                                              tied_embedding_copy(*ctx.pp, tied_grad));
    if (pipe) loss = sum_in_rank_order(*ctx.pp, loss);  // only the last stage's is not 0
    const double norm = std::sqrt(sq);
    if (!std::isfinite(norm) || !std::isfinite(loss))
      throw RuntimeError(str("step ", step, ": non-finite ",
                             std::isfinite(loss) ? "gradient" : "loss", " (loss ", loss,
                             ", grad norm ", norm, "); try a lower --lr or a --grad-clip"));
    if (o.optim.grad_clip > 0) {
      // torch.nn.utils.clip_grad_norm_: scale by min(1, clip / (norm + 1e-6)).
      const double coef = std::min(1.0, o.optim.grad_clip / (norm + 1e-6));
      if (coef < 1.0) dp.scale_grads(float(coef));
    }
    {
      Trace::Span span(trace, "optimizer", "compute");
      opt.update(dp.param_storage(), dp.grad_storage(), lr, step);
      // Each rank checks what it updated; the ranks agree before anyone goes on, so a
      // poisoned update ends every rank here, before a save or an export can write it.
      int64_t poisoned = opt.state_finite(dp.param_storage()) ? 0 : 1;
      ctx.world->all_reduce(&poisoned, &poisoned, 1, DType::i64, ReduceOp::max).wait();
      if (poisoned)
        throw RuntimeError(str("step ", step,
                               ": non-finite weights after the update; not saving (the last "
                               "checkpoint written stays the newest; try a lower --lr)"));
      dp.after_optimizer();
      if (cfg.router_bias_update > 0)
        for (MoeLayer* m : moe) update_router_bias(*m, ctx.dp.get());
    }
    const double exposed = dp.take_exposed_seconds();
    const CommStats dp1 = ctx.dp->stats(), tp1 = ctx.tp->stats();
    const uint64_t tp_bytes = tp1.bytes_sent - tp0.bytes_sent;
    const uint64_t comm_bytes = dp1.bytes_sent - dp0.bytes_sent + tp_bytes;
    const double dt = sw.elapsed();
    trace.add("step " + std::to_string(step), "step", t_step, now_seconds());
    const double tps = double(B) * T / dt;
    const double mfu = peak > 0 ? cfg.flops_per_token() * tps / peak : 0;
    summary.losses.push_back(loss);
    nlohmann::json rec = {{"step", step},
                          {"loss", loss},
                          {"lr", lr},
                          {"grad_norm", norm},
                          {"step_time_s", dt},
                          {"tokens_per_s", tps},
                          {"mfu", mfu},
                          {"comm_exposed_s", exposed},
                          {"comm_bytes", comm_bytes}};
    if (pipe) {
      // Idle / step time of the schedule, averaged over every rank (CONTRACTS.md §6).
      const double mean = pipeline_bubble(*ctx.world, ps.busy_seconds, ps.step_seconds);
      rec["bubble"] = mean;
      rec["bubble_theory"] = bubble_theory;
      if (u > start || o.optim.steps - start == 1) bubble_sum += mean;  // step 1 warms up
      if (lead && u == start)
        progress.line(str("step ", step, ": pipeline bubble ", mean * 100, "% (theory ",
                          bubble_theory * 100, "%)"));
    }
    if (par.tp > 1) {
      rec["tp_comm_bytes"] = tp_bytes;
      rec["tp_comm_calls"] = tp1.calls - tp0.calls;
      rec["tp_comm_wait_s"] = tp1.wait_seconds - tp0.wait_seconds;
    }
    moe_metrics.reduce();  // collective: every rank, every step
    moe_metrics.add_to(rec);
    const bool eval_now =
        val && o.optim.eval_every > 0 && (step % o.optim.eval_every == 0 || step == o.optim.steps);
    if (eval_now) {
      moe_metrics.set_recording(false);  // routing statistics cover training forwards only
      const double vl = evaluate(model, *val, o.optim.eval_batches, dp, pipe.get(),
                                 pipe ? ctx.pp.get() : nullptr);
      moe_metrics.set_recording(true);
      rec["val_loss"] = vl;
      summary.final_val_loss = vl;
      if (lead) progress.line(str("step ", step, ": val_loss ", vl));
      if (lead) print_moe_summary(step);
    }
    metrics.write(rec);
    progress.step({step, o.optim.steps, loss, lr, norm, dt, tps, mfu});

    if (u == start) {
      // Memory record of every rank, gathered to rank 0 (CONTRACTS.md §6).
      const int n = world.size();
      constexpr int kFields = 7;
      std::vector<int64_t> mem(kFields * size_t(n), 0);
      int64_t* mine = mem.data() + kFields * world.rank();
      const DataParallelMemory dm = dp.memory();
      mine[0] = int64_t(dm.params_bytes);
      mine[1] = int64_t(dm.grads_bytes);
      mine[2] = int64_t(opt.state_bytes());
      mine[3] = int64_t(model.activation_peak_bytes());
      mine[4] = int64_t(dm.param_buffer_bytes);
      mine[5] = int64_t(dm.grad_buffer_bytes);
      // Microbatches holding activations at once: the schedule's in-flight peak under pp
      // (1f1b: stages - stage, gpipe: all), one otherwise.
      mine[6] = pipe ? ps.peak_in_flight : 1;
      ctx.world->all_reduce(mem.data(), mem.data(), mem.size(), DType::i64, ReduceOp::sum).wait();
      for (int r = 0; r < n; ++r) {
        const int64_t* f = mem.data() + kFields * r;
        metrics.write({{"event", "memory"},
                       {"rank", r},
                       {"params_bytes", f[0]},
                       {"grads_bytes", f[1]},
                       {"optimizer_bytes", f[2]},
                       {"activations_peak_bytes", f[3]},
                       {"gather_buffer_bytes", f[4]},
                       {"grad_buffer_bytes", f[5]},
                       {"microbatches_in_flight_peak", f[6]}});
      }
      if (lead) {
        auto mib = [](int64_t bytes) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.2f MiB", double(bytes) / (1024 * 1024));
          return std::string(buf);
        };
        progress.line(str("memory per rank (rank 0, dp ", par.dp, ", tp ", par.tp, sp ? " sp" : "",
                          ", zero ", par.zero, "): params ", mib(mine[0]), ", grads ", mib(mine[1]),
                          ", optimizer ", mib(mine[2]), ", activations ", mib(mine[3]),
                          pipe ? str(" (", mine[6], " microbatches in flight)") : ""));
      }
    }
    if (!o.io.save.empty() && o.io.save_every > 0 && step % o.io.save_every == 0 &&
        step != o.optim.steps)
      save(step);
  }
  progress.finish();
  if (lead && !(val && o.optim.eval_every > 0)) print_moe_summary(o.optim.steps);
  moe_metrics.set_recording(false);  // sampling forwards
  if (pipe && lead) {
    const int counted = std::max(1, o.optim.steps - start - 1);
    progress.line(str("pipeline bubble (", par.schedule, ", pp ", par.pp, ", ", M,
                      " microbatches): measured ", 100 * bubble_sum / counted,
                      "% (mean over steps after the first), theory ", 100 * bubble_theory, "%"));
  }

  if (!o.io.save.empty()) save(o.optim.steps);
  // Export and sampling read the model's own arenas: gather the global weights into them,
  // then (tensor parallelism) the global tensors out of every tp rank's pieces, then the
  // whole model from the stages and the experts' owners to rank 0.
  dp.restore_model();
  const bool sample_now = o.io.sample_tokens > 0;
  // Rank 0's own model is whole only without tp, pp and ep; otherwise sample on a copy.
  const bool sample_copy = sample_now && (tp_comm || pipe || par.ep > 1);
  if (!o.io.export_path.empty() || sample_copy) {
    const GlobalTensors global =
        view->to_lead(assemble_global(table, model.params().data(), tp_comm));
    std::vector<NamedTensor> biases;
    if (sample_copy) biases = view->router_biases_to_lead();  // they steer expert selection
    if (lead && !o.io.export_path.empty())
      export_weights(o.io.export_path, view->whole(), cfg, global);
    if (lead && sample_copy) {
      // Sampling wants whole logit rows and every block: run it on an unsharded copy.
      GPT whole(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 1);
      for (size_t i = 0; i < global.size(); ++i) {
        const ParamInfo& p = whole.table().entries()[i];
        MT_CHECK(p.name == view->whole().entries()[i].name, "tables differ at ", p.name);
        std::copy(global[i].begin(), global[i].end(), whole.params().data() + p.offset);
      }
      const std::vector<MoeLayer*> whole_moe = whole.moe_layers();
      for (size_t i = 0; i < biases.size(); ++i) whole_moe[i]->router_bias() = biases[i].data;
      print_sample(whole, o, progress);
    }
  }
  if (!o.io.trace.empty()) trace.write(*ctx.world, o.io.trace);
  if (lead && sample_now && !sample_copy) print_sample(model, o, progress);
  ctx.world->barrier().wait();
  return summary;
}

}  // namespace mt
