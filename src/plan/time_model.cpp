#include "plan/time_model.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.h"
#include "plan/cost_model.h"
#include "plan/rank_waits.h"
#include "plan/zero3_overlap.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt::plan {

namespace {

// ZeRO 3: every block's parameters are gathered before its forward and again before its
// backward, per microbatch, and its gradient reduce-scattered, one collective per block as
// the engine does (each pays the latency). With zero3_overlap they run on their own stream
// under the compute, zero3_prefetch gathers ahead (zero3_pass_exposed: each chunk's first
// gather and its last reduce-scatter stay exposed, and whatever a block's collectives take
// beyond its compute); without, every collective is exposed. zero3_overlap between 0 and 1
// weighs the two.
void add_zero3(const CostContext& c, int microbatches, PredictedTime& p) {
  if (c.l.zero != 3 || c.l.data_ranks() <= 1) return;
  const HardwareProfile& hw = c.r.hardware;
  const int chunks = std::max(c.l.virtual_stages, 1);
  for (StageCosts& sc : p.stages) {
    const int units = std::max(sc.blocks, 1), per_chunk = std::max(units / chunks, 1);
    const double bytes = sc.params * 4 / units;
    const double gather = collective_seconds(hw, Collective::all_gather, bytes, c.dp);
    const double scatter = collective_seconds(hw, Collective::reduce_scatter, bytes, c.dp);
    const double passes = double(units) / per_chunk;  // chunks of per_chunk blocks
    const double hidden_fwd =
        passes * zero3_pass_exposed({sc.forward / units, gather, 0}, per_chunk, hw.zero3_prefetch);
    const double hidden_bwd =
        passes * zero3_pass_exposed({(sc.backward + sc.weight) / units, gather, scatter}, per_chunk,
                                    hw.zero3_prefetch);
    const double w = hw.zero3_overlap;
    const double fwd = w * hidden_fwd + (1 - w) * units * gather;
    const double bwd = w * hidden_bwd + (1 - w) * units * (gather + scatter);
    sc.forward += fwd;
    sc.backward += bwd;
    p.zero3_exposed_s = std::max(p.zero3_exposed_s, (fwd + bwd) * microbatches);
  }
}

// A pipeline message: the (b s, h) boundary [/tp under SP], over NVLink or a NIC; with
// p2p_scatter_gather each tp rank sends 1/tp of it over its own link and the receivers
// all-gather it over tp.
double p2p_message(const CostContext& c) {
  const Layout& l = c.l;
  const HardwareProfile& hw = c.r.hardware;
  if (l.pp <= 1) return 0;
  const double boundary = c.N * c.h * c.e / (l.sequence_parallel ? l.tp : 1);
  const bool across = !hw.local && l.world() > hw.devices_per_node;
  if (hw.p2p_scatter_gather && l.tp > 1 && !l.sequence_parallel)
    return p2p_seconds(hw, boundary / l.tp, across) +
           collective_seconds(hw, Collective::all_gather, boundary, c.tp);
  return p2p_seconds(hw, boundary, across);
}

// The simulator's ops per stage: each stage's costs per local chunk; blocking p2p
// (Megatron: batch_isend_irecv, wait, cuda.synchronize) is paid by every chunk's forward and
// backward on its own timeline (the data is there when the sender's op ends), asynchronous
// p2p is the send->receive latency.
// DualPipe-V with fb_a2a_overlap (DeepSeek-V3): in an F&B pair the F half's all-to-alls run
// under the B half's compute and the B half's under the F half's, as the fraction of the
// shorter half the simulator overlaps (OpCosts::fb_overlap). Each half's exposed all-to-all
// is half the stage's (dispatch + combine each way).
// With comm_sms, the communication kernels hold comm_sms of the device's SMs while the
// computation they hide under runs (DeepSeek-V3 3.2.2): that computation slows by the
// share, so a pair saves hidden x (1 - comm_sms / sms).
double fb_overlap(const StageCosts& sc, const HardwareProfile& hw) {
  if (!hw.fb_a2a_overlap) return 0;
  const double a2a = sc.ep_comm / 2, f = sc.forward, b = sc.backward + sc.weight;
  const double hidden =
      std::min(a2a, std::max(0.0, b - a2a)) + std::min(a2a, std::max(0.0, f - a2a));
  const double held = hw.sms > 0 ? std::min(1.0, hw.comm_sms / hw.sms) : 0.0;
  const double shorter = std::min(sc.forward, sc.backward);
  return shorter > 0 ? std::min(1.0, hidden * (1 - held) / shorter) : 0.0;
}

std::vector<OpCosts> stage_ops(const PredictedTime& p, const Layout& l, bool blocking,
                               const HardwareProfile* pairs) {
  std::vector<OpCosts> ops;
  const double v = l.virtual_stages, t = p.pp_p2p_s;
  for (const StageCosts& sc : p.stages) {
    ops.push_back(blocking ? OpCosts{sc.forward / v + t, sc.backward / v + t, sc.weight / v, 0.0}
                           : OpCosts{sc.forward / v, sc.backward / v, sc.weight / v, t});
    if (pairs) ops.back().fb_overlap = fb_overlap(sc, *pairs);
  }
  return ops;
}

void add_grad_syncs(const CostContext& c, const std::vector<StageCosts>& stages,
                    std::vector<OpCosts>& ops);
bool sync_in_replay(const CostContext& c);

// The pipeline's makespan; with sync_in_replay, the replay's gradient syncs after it until
// the last stage is done (grad_sync_tail_s, in dp_exposed_s: add_after_pipeline).
void add_pipeline(const CostContext& c, const Schedule& schedule, int mb, PredictedTime& p) {
  p.pp_p2p_s = p2p_message(c);
  if (c.l.pp > 1) {
    const HardwareProfile& hw = c.r.hardware;
    std::vector<OpCosts> ops = stage_ops(p, c.l, hw.p2p_blocking, &hw);
    if (sync_in_replay(c)) add_grad_syncs(c, p.stages, ops);
    const Timeline tl = simulate_schedule(schedule, ops);
    MT_CHECK(!tl.deadlocked);
    p.pipeline_s = tl.makespan;
    p.bubble = tl.bubble();
    p.grad_sync_tail_s = tl.synced_end() - tl.makespan;
  } else {
    const StageCosts& sc = p.stages[0];
    p.pipeline_s = mb * (sc.forward + sc.backward + sc.weight);
  }
}

// The share of its seconds the computation of one of the stage's passes (`backward`: its
// input and weight gradients; else its forward) loses beside a data-parallel collective that
// holds collective_sms of the sms. The blocks' linear GEMMs (the attention's projections and,
// in a stage without experts, the dense MLP's) run on the SMs left in the waves they need
// (held_sms_loss of each GEMM's output: the forward's and input gradient's N x layer
// output / input, the weight gradient's out x in); the rest of the pass (attention core,
// memory-bound passes, experts, head) loses the held share. 0 without sms or collective_sms.
double dp_held_share(const CostContext& c, const StageCosts& sc, bool backward) {
  const HardwareProfile& hw = c.r.hardware;
  if (hw.sms <= 0 || hw.collective_sms <= 0) return 0;
  const double k = hw.collective_sms, held = std::min(1.0, k / hw.sms), N = c.N, t = c.t;
  std::vector<LinearShape> layers;
  for (const Projection& x : c.w.att.projections) layers.push_back({x.rank_out(t), x.rank_in(t)});
  if (sc.expert_params <= 0 && c.w.ffn > 0) {
    layers.push_back({(c.w.gated ? 2 : 1) * c.w.ffn / t, c.h});
    layers.push_back({c.h, c.w.ffn / t});
  }
  double gemms = 0, lost = 0;  // one block's
  auto add = [&](double seconds, double M, double cols) {
    gemms += seconds;
    lost += seconds * held_sms_loss(hw.sms, k, M, cols);
  };
  for (const LinearShape& x : layers) {
    if (!backward) {
      add(weight_gemm(c, c.rates, N, x.out, x.in), N, x.out);
      continue;
    }
    add(weight_gemm(c, c.rates, N, x.out, x.in), N, x.in);
    add(weight_gemm(c, c.rates, x.out, x.in, N, 1, false), x.out, x.in);
  }
  const double pass = backward ? sc.backward + sc.weight : sc.forward;
  if (pass <= 0 || gemms <= 0) return held;
  const double share = std::min(1.0, sc.blocks * gemms / pass);
  return share * (lost / gemms) + (1 - share) * held;
}

// One stage's gradient reduction over dp (experts over dp / ep): ZeRO 0 an all-reduce,
// ZeRO 1/2 a reduce-scatter and, after the step, the all-gather of the updated parameters
// (param_gather_bytes each), exposed but for param_gather_overlap of the next step's first
// microbatch's forward, the only compute the gathers run under before the stage needs every
// one of its parameters; ZeRO 3 reduces per microbatch (add_zero3).
struct DpParts {
  double reduce = 0;    // the gradients' collectives
  double after = 0;     // the parameter gather's exposed part
  double gathered = 0;  // ... and its hidden part
};

DpParts dp_parts(const CostContext& c, const StageCosts& sc) {
  const Layout& l = c.l;
  const HardwareProfile& hw = c.r.hardware;
  const double gb = hw.grad_reduce_bytes;
  const double dense = (sc.params - sc.expert_params) * gb, experts = sc.expert_params * gb;
  const int d = l.data_ranks(), expert_dp = d / l.ep;
  DpParts x;
  if (d > 1 && l.zero == 0) x.reduce = collective_seconds(hw, Collective::all_reduce, dense, c.dp);
  if (d > 1 && (l.zero == 1 || l.zero == 2)) {
    x.reduce = collective_seconds(hw, Collective::reduce_scatter, dense, c.dp);
    const double params = (sc.params - sc.expert_params) * hw.param_gather_bytes;
    const double gather = collective_seconds(hw, Collective::all_gather, params, c.dp);
    x.after = std::max(0.0, gather - hw.param_gather_overlap * sc.forward);
    x.gathered = gather - x.after;
  }
  if (expert_dp > 1 && l.zero < 3)
    x.reduce += collective_seconds(hw, Collective::all_reduce, experts,
                                   group_span(hw, expert_dp, l.tp * l.cp * l.ep));
  return x;
}

// Whether the pipeline replay places each stage's gradient sync (grad_sync_placement, with
// pp and a reduction after the pipeline to place).
bool sync_in_replay(const CostContext& c) {
  return c.r.hardware.grad_sync_placement > 0 && c.l.pp > 1 && c.l.zero < 3 && c.l.data_ranks() > 1;
}

// The stage's exposed dp time (dp_parts): dp_overlap of the reduction hides under the last
// microbatch's backward (the earlier ones only accumulate); placed in the replay
// (sync_in_replay), the reduction is the replay's and only the gather is counted here.
// What hides still holds collective_sms of the sms while it runs (NCCL's CTAs do not share
// an SM with compute kernels): the computation beside it runs on the SMs left, so each hidden
// second costs dp_held_share of a second (the gather's under the forward, the reduction's
// under the backward, whose window is counted as dp_overlap's in both cases).
double dp_exposed(const CostContext& c, const StageCosts& sc, double* sms_s) {
  const DpParts x = dp_parts(c, sc);
  const double window = c.r.hardware.dp_overlap * (sc.backward + sc.weight);
  const double reduced = std::min(x.reduce, window);
  *sms_s = x.gathered * dp_held_share(c, sc, false) + reduced * dp_held_share(c, sc, true);
  const double reduce_exposed = sync_in_replay(c) ? 0.0 : std::max(0.0, x.reduce - window);
  return reduce_exposed + x.after + *sms_s;
}

// AdamW and its passes over the elements the stage's ranks update (optimizer_bytes streamed
// each, in optimizer_kernels passes).
double optimizer_seconds(const CostContext& c, const StageCosts& sc) {
  const Layout& l = c.l;
  const double updated =
      l.zero > 0 ? (sc.params - sc.expert_params) / l.data_ranks() + sc.expert_params : sc.params;
  const HardwareProfile& hw = c.r.hardware;
  return stream_seconds(c.rates, updated * hw.optimizer_bytes, hw.optimizer_kernels);
}

// The data-parallel wrapper's passes over the stage's whole gradient buffer (every
// parameter of its ranks, experts included: not the shard ZeRO leaves the optimizer), on the
// compute stream once per step (grad_buffer_bytes: Megatron's zeroing, NaN check and 1/dp
// scaling). With sync_in_replay the grad_sync_pass_bytes of them run where the replay
// starts each chunk's sync (sync_pass_seconds); the rest is counted here, once, on the
// slowest stage, like the optimizer.
double grad_buffer_seconds(const CostContext& c, const StageCosts& sc) {
  const HardwareProfile& hw = c.r.hardware;
  const double placed = sync_in_replay(c) ? hw.grad_sync_pass_bytes : 0.0;
  const double bytes = sc.params * std::max(0.0, hw.grad_buffer_bytes - placed);
  return bytes > 0 ? stream_seconds(c.rates, bytes, 1) : 0.0;
}

// One local chunk's share of the passes the replay places at its sync.
double sync_pass_seconds(const CostContext& c, const StageCosts& sc) {
  const double bytes = sc.params * c.r.hardware.grad_sync_pass_bytes / c.l.virtual_stages;
  return bytes > 0 ? stream_seconds(c.rates, bytes, 1) : 0.0;
}

// The replay's gradient syncs (OpCosts::sync, grad_sync_points.h). grad_sync_placement 1:
// every stage syncs after its own last backward (Megatron-LM 2021/2022: train_step's
// allreduce_gradients after the stage's forward_backward_func returns); 2: Megatron-Core's
// delayed grad reduce, stage r starting a chunk's sync r backwards after the chunk's last
// (schedules.py at f2e5db402c), except that without interleaving the first stage's buckets
// start from its last backward's hooks (dp_overlap of it hides them).
void add_grad_syncs(const CostContext& c, const std::vector<StageCosts>& stages,
                    std::vector<OpCosts>& ops) {
  const HardwareProfile& hw = c.r.hardware;
  const int v = c.l.virtual_stages;
  for (size_t st = 0; st < ops.size(); ++st) {
    OpCosts::GradSync& g = ops[st].sync;
    g.on = true;
    g.pass = sync_pass_seconds(c, stages[st]);
    g.reduce = dp_parts(c, stages[st]).reduce / v;
    const bool delayed = hw.grad_sync_placement >= 2;
    g.delay = delayed ? int(st) : std::numeric_limits<int>::max();
    g.hidden = delayed && st == 0 && v == 1 ? hw.dp_overlap : 0.0;
  }
}

// What follows the pipeline, decided by the slowest stage: the dp reduction, the tied
// embedding's all-reduce between the first and last stage, the optimizer, the world's
// latency-bound all-reduces, and (local bf16) the linears' bf16 weight copies, rounded at
// their first use after the weights change, once per step on the slowest stage's cores
// (the layers on the dense tiles and the AMX experts: both packs instead, at the
// calibrated pack cost).
void add_after_pipeline(const CostContext& c, int mb, PredictedTime& p) {
  const Layout& l = c.l;
  const HardwareProfile& hw = c.r.hardware;
  double opt = 0;
  for (const StageCosts& sc : p.stages) {
    p.tp_exposed_s = std::max(p.tp_exposed_s, sc.tp_comm * mb);
    p.ep_exposed_s = std::max(p.ep_exposed_s, sc.ep_comm * mb);
    p.cp_exposed_s = std::max(p.cp_exposed_s, sc.cp_comm * mb);
    p.recompute_s = std::max(p.recompute_s, sc.recompute * mb);
    double sms_s = 0;
    const double dp = dp_exposed(c, sc, &sms_s);
    if (dp > p.dp_exposed_s) p.dp_sms_s = sms_s;
    p.dp_exposed_s = std::max(p.dp_exposed_s, dp);
    opt = std::max(opt, optimizer_seconds(c, sc) + grad_buffer_seconds(c, sc));
    if (c.local_bf16)
      p.bf16_weights_s =
          std::max(p.bf16_weights_s,
                   local_convert_seconds(
                       c.rates, sc.linear_weights - sc.tile_weights - sc.expert_pack_weights,
                       4 * sc.blocks + 1) +
                       sc.tile_weights * c.rates.tiles_pack_s +
                       sc.expert_pack_weights * c.rates.expert_pack_s);
  }
  p.dp_exposed_s += p.grad_sync_tail_s;
  // DualPipe-V holds the embedding and the head on stage 0: nothing to sum between stages.
  const bool v_shape = placement_of(schedule_kind(l.schedule)) == ChunkPlacement::v_shape;
  if (hw.tied_embedding_reduce && l.pp > 1 && c.r.model.tied() && !v_shape) {
    const double Vl = double(tp::padded_vocab(c.r.model.vocab, l.tp)) / l.tp;
    const GroupSpan ends = group_span(hw, 2, l.tp * l.cp * l.dp * (l.pp - 1));
    p.dp_exposed_s +=
        collective_seconds(hw, Collective::all_reduce, Vl * c.h * hw.grad_reduce_bytes, ends);
  }
  const GroupSpan world = group_span(hw, l.world(), 1);
  p.optimizer_s =
      opt + hw.world_all_reduces * collective_seconds(hw, Collective::all_reduce, 8, world);
}

// The step on dedicated cores (or GPUs).
PredictedTime predict_dedicated(const PlanRequest& r, const Layout& l, const Schedule& schedule,
                                double give_up_above) {
  const CostContext c = make_context(r, l);
  PredictedTime p;
  p.stages = stage_costs(r, l);
  const int mb = microbatches(r, l);
  add_zero3(c, mb, p);
  // The slowest stage's compute alone: a lower bound of any schedule, less (DualPipe-V with
  // fb_a2a_overlap) what each microbatch's F&B pair may hide of its all-to-alls; counting
  // those as compute once pruned a layout faster than the one kept (the DeepSeek-V3 row).
  double bound = 0;
  const bool pairs = r.hardware.fb_a2a_overlap && schedule.placement == ChunkPlacement::v_shape;
  for (const StageCosts& sc : p.stages) {
    const double paired =
        pairs ? fb_overlap(sc, r.hardware) * std::min(sc.forward, sc.backward + sc.weight) : 0.0;
    bound = std::max(bound, mb * (sc.forward + sc.backward + sc.weight - paired));
  }
  if (bound > give_up_above) {
    p.pruned = true;
    p.step_s = bound;
    return p;
  }
  add_pipeline(c, schedule, mb, p);
  add_after_pipeline(c, mb, p);
  p.step_s = p.pipeline_s + p.dp_exposed_s + p.optimizer_s + p.bf16_weights_s;
  return p;
}

}  // namespace

Oversubscription oversubscription(const PlanRequest& r, const Layout& l) {
  Oversubscription o{r};
  const HardwareProfile& hw = r.hardware;
  const double threads = double(l.world()) * r.threads;
  if (!hw.local || threads <= hw.cores) return o;
  // A waiting rank blocks until a peer that was not running arrives (comm/local/doorbell.h):
  // every collective and send pays the calibrated oversubscribed latency. A probe that read
  // 0 (busy ranks sharing the cores arrive together: the one-float all-reduce added nothing)
  // is that latency too. Only a profile without the probe keeps the links probe's (before
  // stop 42 an unbound ping-pong, often a stacked pair's spin budget, comm_probes.cpp):
  // the quiet 02:20 profile read 0 there and 66 us idle, and
  // charging 4 x 66 us to each of tp 4's ~400 collectives in 8 microbatches predicted
  // 154 ms for a step measured at 86 ms (issue #30).
  if (r.backend == "local" && oversubscribed_probed(hw))
    o.dedicated.hardware.intra_latency_s = o.dedicated.hardware.inter_latency_s =
        hw.oversubscribed_latency_s;
  // And its bytes cost the wall measured among busy ranks sharing the cores (the members
  // reduce their chunks in turn): a wait like the latency, not work stretched again.
  if (r.backend == "local" && hw.oversubscribed_busbw > 0) {
    o.dedicated.hardware.intra_busbw = o.dedicated.hardware.inter_busbw = hw.oversubscribed_busbw;
    o.collective_bytes_wait = true;
  }
  if (hw.cores > 0) {
    o.shared = true;
    o.dedicated.hardware.cores = l.world() * r.threads;
    o.slowdown = threads / hw.cores;
    // A stage is every rank of its pp coordinate: dp x cp x tp of them (cp's ranks hold the
    // same layers over other tokens and compute at the same time as the stage's others).
    o.width = double(l.world() / l.pp) * r.threads;
  }
  return o;
}

namespace {

// The wait-free twin of the dedicated request: its costs are the ranks' work alone. The
// collectives' latency is a wait; so are their bytes where the oversubscribed bus bandwidth
// was measured (it is the wall they add to ranks that share the cores).
PlanRequest without_waits(const Oversubscription& o) {
  PlanRequest w = o.dedicated;
  w.hardware.intra_latency_s = w.hardware.inter_latency_s = 0;
  if (o.collective_bytes_wait) w.hardware.intra_busbw = w.hardware.inter_busbw = 1e30;
  return w;
}

double after_pipeline(const PredictedTime& p) {
  return p.dp_exposed_s + p.optimizer_s + p.bf16_weights_s;
}

// Local pp on a core per rank thread: compute_rates priced every stage with all the ranks'
// cores computing (the calibrated parallel efficiency); in the pipeline's bubble a stage
// that computes while others wait runs at the rate of fewer busy cores, one core's alone.
// The schedule is replayed so (shared_cores_makespan with the efficiency). Oversubscribed
// layouts keep their replay as it was: their stages share the cores (docs/planner.md).
void lone_stages_faster(const PlanRequest& r, const Layout& l, const Schedule& schedule,
                        PredictedTime& p) {
  const HardwareProfile& hw = r.hardware;
  if (!hw.local || hw.cores < 2 || hw.parallel_efficiency <= 0 || l.pp <= 1 || p.pruned) return;
  const std::vector<OpCosts> ops = stage_ops(p, l, hw.p2p_blocking, &hw);
  const double pipeline = shared_cores_makespan(schedule, ops, double(l.world() / l.pp) * r.threads,
                                                hw.cores, hw.parallel_efficiency);
  p.step_s += pipeline - p.pipeline_s;
  p.pipeline_s = pipeline;
}

}  // namespace

PredictedTime predict_time(const PlanRequest& r, const Layout& l, const Schedule& schedule,
                           double give_up_above) {
  const Oversubscription o = oversubscription(r, l);
  PredictedTime p = predict_dedicated(o.dedicated, l, schedule, give_up_above);
  if (!o.shared) lone_stages_faster(o.dedicated, l, schedule, p);
  if (!o.shared || p.pruned) return p;
  // More rank threads than cores time-share them (processor sharing): the costs above are
  // every rank's at full speed; a rank that waits, in a bubble or for a peer, blocks and
  // leaves its core to one that can run. The pipeline is replayed with the computing
  // stages sharing the cores (a pp 4 pipeline of one microbatch on 2 cores runs its stages
  // one after another at full speed; 1f1b's warm-up and cool-down, where fewer stages
  // compute than there are cores, waste the rest); without pp every rank computes
  // throughout. What follows the pipeline runs on every rank at once.
  // Only the work time-shares; the collectives' waits do not add to it. A rank that waits
  // yields its core (the local backend does not spin on oversubscribed cores,
  // comm/local/doorbell.h) to a rank that computes, so a wait costs the step nothing while
  // another rank has work for that core: the step is the larger of the work over the cores
  // (the wait-free twin's costs, time-shared) and the critical path (the step priced on
  // dedicated cores with the oversubscribed waits: each rank at full speed, every wait on
  // its path). Before, the waits were added to the shared work, which counted every
  // collective's latency as idle cores (tp 4 on 2 cores: ~450 of them, ~30 ms the runs did
  // not show; PlanSharedCores.WaitsOnSharedCoresHideUnderTheOtherRanksWork).
  const PredictedTime w = predict_dedicated(without_waits(o), l, schedule, 1e300);
  double pipeline = w.pipeline_s * o.slowdown;
  std::vector<int> blocked;
  if (l.pp > 1) {
    std::vector<OpCosts> ops = stage_ops(w, l, false, nullptr);
    for (OpCosts& op : ops) op.latency = p.pp_p2p_s;  // a send's latency is a wait already
    pipeline = shared_cores_makespan(schedule, ops, o.width, r.hardware.cores, 0, &blocked);
  }
  const double work = pipeline + after_pipeline(w) * o.slowdown;
  p.step_s = std::max(work, p.pipeline_s + after_pipeline(p));
  // Every wait that sleeps costs the wall of its wake-up (rank_waits.h): the woken rank
  // runs only when its core's other rank yields it. 0 without the probe's figure.
  p.blocking_waits = blocking_waits_per_rank(l, blocked, r.hardware.world_all_reduces);
  if (r.backend == "local") p.wake_s = p.blocking_waits * r.hardware.oversubscribed_wake_s;
  p.step_s += p.wake_s;
  return p;
}

}  // namespace mt::plan
