#include "train/memory_estimate.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/system_memory.h"
#include "kernels/attention.h"
#include "model/block.h"
#include "model/gpt.h"
#include "model/moe_layer.h"
#include "model/recompute.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/pipeline/stage_chunks.h"
#include "schedule/schedule.h"
#include "tensor_parallel/vocab_parallel.h"

namespace mt {

namespace {

constexpr int64_t kFloat = sizeof(float);

// ParamTable and SlotLayout round every tensor / buffer up to 16 floats.
int64_t a16(int64_t n) {
  return (n + 15) / 16 * 16;
}

// SlotLayout::reserve_bf16: n bf16 values in (n + 1) / 2 floats, then rounded as above.
int64_t h16(int64_t n) {
  return a16((n + 1) / 2);
}

// The sizes one rank's chunk registers, in floats.
struct ChunkShape {
  int64_t edge_unit = 0;             // embedding + ln_f + tied wte (aligned, as in the table)
  std::vector<int64_t> block_units;  // one per block (aligned)
  int64_t real = 0;                  // real elements (no alignment), experts included
  int64_t expert_real = 0;           // real elements of this rank's experts
  int64_t slot = 0;                  // activation slot floats
  int64_t wte = 0;                   // wte elements on this chunk (0: none)
  int64_t workspace = 0;             // scratch arenas outside the slots
  int64_t bf16_weights = 0;          // --precision bf16: the linears' bf16 copies (values)
};

struct Shape {
  const ModelConfig& cfg;
  int tp, ep, b;  // b: microbatch size in sequences
  bool sp;
  Recompute recompute;
  bool bf16 = false;  // --precision bf16
};

ChunkShape chunk_shape(const Shape& s, const ChunkSpec& spec, bool& wte_registered) {
  const ModelConfig& cfg = s.cfg;
  const int64_t C = cfg.dim, T = cfg.seq, H = cfg.hidden(), E = cfg.experts;
  const int64_t N = int64_t(s.b) * T, Nl = s.sp ? N / s.tp : N;
  const int64_t Cl = C / s.tp, Hl = H / s.tp, NHl = cfg.heads / s.tp;
  const int64_t Vl = tp::padded_vocab(cfg.vocab, s.tp) / s.tp;
  ChunkShape c;
  auto param = [&](int64_t n, int64_t& unit) {
    unit += a16(n);
    c.real += n;
  };
  // Edge unit (model_chunk.cpp: embedding, then head), wte registered once per rank.
  auto wte = [&] {
    if (wte_registered) return;
    wte_registered = true;
    c.wte = (s.tp > 1 ? Vl : cfg.vocab) * C;
    param(c.wte, c.edge_unit);
  };
  if (spec.has_embedding) {
    wte();
    param(int64_t(cfg.position_rows()) * C, c.edge_unit);
  }
  if (spec.has_head) {
    wte();
    param(C, c.edge_unit);
    param(C, c.edge_unit);
    // lm_head.cpp: lnf_out, mean, rstd, [lnf_full], logits, losses, ce_stats, d_lnf;
    // under bf16 lnf_out and lnf_full are bf16.
    auto gemm_only = [&](int64_t n) { return s.bf16 ? h16(n) : a16(n); };
    c.slot += gemm_only(Nl * C) + a16(Nl * C) + 2 * a16(Nl) + (s.sp ? gemm_only(N * C) : 0) +
              a16(N * Vl) + a16(N) + a16(3 * N);
    if (s.bf16) c.bf16_weights += Vl * C;
  }
  const int nblocks = spec.last_layer - spec.first_layer;
  const bool full = s.recompute == Recompute::full;
  const bool selective = s.recompute == Recompute::selective;
  const int64_t probs = int64_t(s.b) * NHl * T * T;  // attention probabilities
  int64_t block_scratch = 0;  // full: the largest block's buffers, outside the slots
  int64_t moe_stage = 0;      // bf16: the experts' share of the chunk's fp32 stage
  for (int l = spec.first_layer; l < spec.last_layer; ++l) {
    int64_t unit = 0, block = 0;                   // block: the block's buffers (floats)
    param(C, unit), param(C, unit);                // ln_1
    param(3 * Cl * C, unit), param(3 * Cl, unit);  // c_attn
    param(C * Cl, unit), param(C, unit);           // attn.c_proj
    param(C, unit), param(C, unit);                // ln_2
    const bool moe = is_moe_layer(cfg, l);
    if (moe) {
      const int64_t El = E / s.ep;
      param(E * C, unit);  // router
      const int64_t before = c.real;
      for (int64_t e = 0; e < El; ++e) {
        param(H * C, unit), param(H, unit), param(C * H, unit), param(C, unit);
      }
      c.expert_real += c.real - before;
      // moe_layer.cpp: dropless worst case R = ep * N * min(k, El) rows per rank. Under
      // bf16 x_rows, dy_rows (R, C) and fc_out, d_fc (R, H) are bf16; fc_pre stays fp32.
      const int64_t M = N * cfg.topk, R = int64_t(s.ep) * N * std::min<int64_t>(cfg.topk, El);
      block += 2 * a16(N * E) + 4 * a16(M) + 3 * a16(E) + a16(M * C) + a16(R * H) +
               (s.bf16 ? 2 * h16(R * C) + 2 * h16(R * H) : 2 * a16(R * C) + 2 * a16(R * H));
      c.workspace += 2 * std::max(M, R) * C + M;  // rows_a_, rows_b_, dgates_
      if (s.bf16) {
        c.bf16_weights += El * 2 * H * C;
        // pad_, and the stage the experts share with the chunk's other layers
        c.workspace += 2 * MoeLayer::kRowQuantum * std::max(C, H);
        moe_stage = std::max(moe_stage, MoeLayer::bf16_chunk_rows(int(N)) * H);
      }
    } else {
      param(Hl * C, unit), param(Hl, unit);  // c_fc
      param(C * Hl, unit), param(C, unit);   // mlp.c_proj
    }
    c.block_units.push_back(unit);
    // block.cpp's reservations, in order (selective: no probabilities). Under bf16 the
    // GEMM-only buffers are bf16: ln1_out, att_out, ln2_out (dense), fc_out, d_fc, d_qkv.
    const int64_t nh = moe ? 0 : N * Hl;
    if (!s.bf16) {
      block += 6 * a16(Nl * C) + 4 * a16(Nl) + 2 * a16(N * 3 * Cl) + 2 * a16(N * Cl) +
               (selective ? 0 : a16(probs)) + 3 * a16(nh);
    } else {
      block += (moe ? 5 : 4) * a16(Nl * C) + (moe ? 1 : 2) * h16(Nl * C) + 4 * a16(Nl) +
               a16(N * 3 * Cl) + h16(N * 3 * Cl) + a16(N * Cl) + h16(N * Cl) +
               (selective ? 0 : a16(probs)) + a16(nh) + 2 * h16(nh);
      c.bf16_weights += 3 * Cl * C + C * Cl + (moe ? 0 : 2 * Hl * C);  // experts: above
    }
    if (full)
      block_scratch = std::max(block_scratch, block);
    else
      c.slot += block;
  }
  // model_chunk.cpp: the recomputation scratch, one per chunk.
  c.workspace += block_scratch;
  if (selective && nblocks > 0) c.workspace += probs;
  // x, dx; tokens + targets. Full recomputation: dx[1..n-1] in two buffers outside the slot.
  const int64_t between = full ? std::max(nblocks - 1, 0) : 0;
  c.slot += int64_t(nblocks + 1) * 2 * a16(Nl * C) - between * a16(Nl * C) + a16(2 * N);
  c.workspace += std::min<int64_t>(between, 2) * a16(Nl * C);
  if (nblocks > 0) c.workspace += int64_t(attention_backward_scratch_floats(s.b, cfg.seq, Cl, NHl));
  if (s.sp) c.workspace += N * C;
  if (s.bf16) {  // model_chunk.cpp: the fp32 stage and the bf16 gather scratch
    const int64_t blocks = nblocks > 0 ? std::max(N * std::max({C, 3 * Cl, Hl}), moe_stage) : 0;
    const int64_t head = spec.has_head ? N * C : 0;
    const int64_t gather = std::max(nblocks > 0 ? N * C : 0, spec.has_head ? N * Vl : 0);
    c.workspace += std::max(blocks, head) + (gather + 1) / 2;
  }
  return c;
}

// Slots each local chunk of `stage` holds at once under the schedule (executor.cpp: F
// acquires, B releases, or W when the backward is split).
std::vector<int> peak_slots(const Schedule& s, int stage) {
  const ActionKind release = s.split_backward ? ActionKind::W : ActionKind::B;
  std::vector<int> live(size_t(s.chunks), 0), peak(size_t(s.chunks), 0);
  for (const Action& a : s.actions[size_t(stage)]) {
    // An F&B pair (DualPipeV) acquires for its F half, then releases for its B half.
    if (a.kind == ActionKind::F || a.kind == ActionKind::FB)
      peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
    if (a.kind == release) --live[a.chunk];
    if (a.kind == ActionKind::FB && release == ActionKind::B) --live[a.b_chunk];
  }
  return peak;
}

int64_t padded(int64_t n, int dp) {
  const int64_t q = int64_t(dp) * 16;
  return (n + q - 1) / q * q;
}

MemoryEstimate estimate_stage(const TrainOptions& o, int stage, const Schedule* schedule) {
  const ParallelOptions& par = o.parallel;
  const ModelConfig& cfg = o.model;
  const int dp = par.dp, M = par.microbatches;
  MT_REQUIRE(o.optim.batch % (dp * M) == 0, "--batch ", o.optim.batch,
             " must be divisible by --dp x --microbatches = ", dp * M);
  Recompute recompute = Recompute::none;
  MT_REQUIRE(parse_recompute(o.optim.recompute, &recompute),
             "--recompute must be none, selective or full (got '", o.optim.recompute, "')");
  const Shape shape{cfg,
                    par.tp,
                    par.ep,
                    o.optim.batch / (dp * M),
                    par.sequence_parallel && par.tp > 1,
                    recompute,
                    o.optim.precision == "bf16"};
  std::vector<ChunkSpec> specs = GPT::whole_model(cfg);
  std::vector<int> slots = {1};
  if (par.pp > 1) {
    specs = stage_chunk_specs(resolve_stage_layers(cfg, par.pp, schedule->chunks, par.stage_layers),
                              par.pp, stage, schedule->placement);
    slots = peak_slots(*schedule, stage);
  }
  bool wte_registered = false;
  std::vector<ChunkShape> chunks;
  for (const ChunkSpec& spec : specs) chunks.push_back(chunk_shape(shape, spec, wte_registered));

  MemoryEstimate e;
  e.pp_stage = stage;
  // Flat space, buckets and ZeRO buffers (flat_layout.cpp, data_parallel.cpp).
  const int64_t bucket_floats = int64_t(par.bucket_mb * 1024 * 1024 / sizeof(float));
  int64_t table = 0, flat = 0, real = 0, expert_real = 0, wte = 0;
  int64_t edge_bucket = 0, block_bucket = 0, block_unit = 0, edge_gather = 0, in_flight = 0;
  int block_buffers = 0;  // ZeRO 2-3: two when some chunk has two block buckets, else one
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkShape& c = chunks[k];
    table += c.edge_unit;
    flat += padded(c.edge_unit, dp);
    edge_bucket = std::max(edge_bucket, padded(c.edge_unit, dp));
    edge_gather += padded(c.edge_unit, dp);
    int64_t open = -1;  // the chunk's current bucket (backward order: last block first)
    int buckets = 0;
    for (auto u = c.block_units.rbegin(); u != c.block_units.rend(); ++u) {
      const int64_t p = padded(*u, dp);
      table += *u;
      flat += p;
      block_unit = std::max(block_unit, p);
      if (open >= 0 && par.zero != 3 && open + p <= bucket_floats) {
        open += p;
      } else {
        open = p;
        ++buckets;
      }
      block_bucket = std::max(block_bucket, open);
    }
    block_buffers = std::max(block_buffers, std::min(buckets, 2));
    real += c.real;
    expert_real += c.expert_real;
    wte += c.wte;
    e.activations_bytes += int64_t(slots[k]) * c.slot * kFloat;
    e.workspace_bytes += c.workspace * kFloat;
    e.bf16_weight_bytes += c.bf16_weights * int64_t(sizeof(uint16_t));
    in_flight += slots[k];
  }
  const int64_t shard = flat / dp;
  const bool ep = par.ep > 1;
  e.params_bytes = (par.zero == 3 ? shard : flat) * kFloat;
  e.grads_bytes = (par.zero >= 2 ? shard : flat) * kFloat;
  if (ep && par.zero == 2) e.grads_bytes += expert_real * kFloat;  // kept whole after the shard
  if (par.zero >= 2) e.buffers_bytes += (edge_bucket + block_buffers * block_bucket) * kFloat;
  if (par.zero == 3) e.buffers_bytes += (edge_gather + 2 * block_unit) * kFloat;
  // AdamW: every real element at ZeRO 0, this rank's 1/dp at ZeRO >= 1 (experts whole
  // under ep: the ranks of an ep group hold different experts at the same offsets).
  int64_t updated = real;
  if (par.zero > 0)
    updated = ep ? (real - expert_real + dp - 1) / dp + expert_real : (real + dp - 1) / dp;
  e.optimizer_bytes = 2 * updated * kFloat;
  // Workspace outside the record: the copy of the expert gradients (ep), the tied wte's
  // summed gradient and its exchange (first and last stage under pp), one activation and
  // one gradient transfer buffer per microbatch in flight (pp), the data loader's batch.
  const int64_t N = int64_t(shape.b) * cfg.seq;
  const int64_t boundary = shape.sp ? N * cfg.dim / par.tp : N * cfg.dim;
  if (ep) e.workspace_bytes += expert_real * kFloat;
  if (par.pp > 1 && wte > 0) e.workspace_bytes += 2 * wte * kFloat;
  if (par.pp > 1) e.workspace_bytes += 2 * in_flight * boundary * kFloat;
  e.workspace_bytes += 2 * int64_t(M) * N * int64_t(sizeof(int));
  e.model_arenas_bytes = 2 * table * kFloat;
  return e;
}

std::string amount(double bytes, bool gib) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", bytes / (gib ? 1024.0 * 1024 * 1024 : 1024.0 * 1024));
  return buf;
}

std::string human(int64_t bytes) {
  const bool gib = bytes >= (int64_t(1) << 30);
  return amount(double(bytes), gib) + (gib ? " GiB" : " MiB");
}

}  // namespace

MemoryEstimate estimate_rank_memory(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  if (p.pp == 1) return estimate_rank_memory(o, Schedule{});
  return estimate_rank_memory(o, make_schedule(p.schedule, p.pp, p.microbatches, p.virtual_stages));
}

MemoryEstimate estimate_rank_memory(const TrainOptions& o, const Schedule& schedule) {
  MemoryEstimate best;
  for (int s = 0; s < o.parallel.pp; ++s) {
    const MemoryEstimate e = estimate_stage(o, s, &schedule);
    if (s == 0 || e.peak() > best.peak()) best = e;
  }
  return best;
}

int ranks_on_this_host(const TrainOptions& o) {
  if (o.engine.backend != "mpi") return o.parallel.world();
  // Open MPI, then MPICH/Hydra; without either we only know about this process.
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n >= 1) return n * o.engine.ranks_per_process;
    }
  return o.engine.ranks_per_process;
}

std::string memory_refusal(const TrainOptions& o, const MemoryEstimate& e, int ranks,
                           int64_t available_bytes, bool limit_from_env) {
  const int64_t per_rank = e.peak(), need = per_rank * int64_t(ranks);
  if (available_bytes <= 0 || need <= available_bytes) return "";
  const ParallelOptions& par = o.parallel;
  // Parts in the per-rank unit, so that they read as a split of the per-rank figure.
  const bool gib = per_rank >= (int64_t(1) << 30);
  auto part = [&](const char* name, int64_t bytes) {
    return bytes > 0 ? str(", ", name, " ", amount(double(bytes), gib)) : std::string();
  };
  std::string parts = part("params", e.params_bytes) + part("grads", e.grads_bytes) +
                      part("optimizer", e.optimizer_bytes) +
                      part("activations", e.activations_bytes) + part("buffers", e.buffers_bytes) +
                      part("workspace", e.workspace_bytes);
  parts += part("model copy at start and end", e.model_arenas_bytes);
  std::string msg =
      str("the run needs about ", human(need), " (", ranks, ranks == 1 ? " rank x " : " ranks x ",
          human(per_rank), par.pp > 1 ? str(" on pipeline stage ", e.pp_stage) : std::string(),
          ": ", parts.substr(2), ") but ",
          limit_from_env ? "MESHTRAIN_MEMORY_LIMIT_BYTES allows " : "this machine has ",
          human(available_bytes), limit_from_env ? "" : " available", "; try ");
  // The remedy follows what dominates.
  const int64_t state =
      e.params_bytes + e.grads_bytes + e.optimizer_bytes + e.buffers_bytes + e.model_arenas_bytes;
  std::vector<std::string> tips;
  const int b = o.optim.batch / (par.dp * par.microbatches);
  if (state >= e.activations_bytes) {
    if (par.dp > 1 && par.zero < 3)
      tips.push_back(par.zero < 2 ? "--zero 2 or 3 (shards optimizer state and gradients over dp)"
                                  : "--zero 3 (also shards the parameters over dp)");
    tips.push_back("more --pp or --tp (splits the model)");
  } else {
    if (b > 1)
      tips.push_back("more --microbatches (smaller activations)");
    else
      tips.push_back("a smaller --batch or --seq (smaller activations)");
    if (par.tp == 1 || !par.sequence_parallel) tips.push_back("more --tp with --sequence-parallel");
  }
  tips.push_back("fewer ranks");
  for (size_t i = 0; i < tips.size(); ++i)
    msg += (i == 0 ? "" : i + 1 == tips.size() ? ", or " : ", ") + tips[i];
  return msg;
}

void check_memory_fits(const TrainOptions& o) {
  int64_t available = 0;
  bool from_env = false;
  if (const char* v = std::getenv("MESHTRAIN_MEMORY_LIMIT_BYTES"); v && *v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    MT_REQUIRE(end && *end == '\0' && n > 0,
               "MESHTRAIN_MEMORY_LIMIT_BYTES must be a positive number of bytes (got '", v, "')");
    available = n;
    from_env = true;
  } else {
    available = available_memory_bytes();
  }
  if (available <= 0) return;
  const std::string why =
      memory_refusal(o, estimate_rank_memory(o), ranks_on_this_host(o), available, from_env);
  if (!why.empty()) throw UsageError(why);
}

}  // namespace mt
