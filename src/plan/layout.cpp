#include "plan/layout.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "core/threads.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "train/option_limits.h"
#include "train/validate_options.h"

namespace mt::plan {

const std::vector<int>& default_stage_layers(const ModelConfig& m, int pp, int virtual_stages) {
  // A memo of a pure function: the search asks for the same few partitions for tens of
  // thousands of candidates, and partition_layers is quadratic in the chunks.
  using Key = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, bool>;
  static std::mutex mu;
  static std::map<Key, std::vector<int>> memo;
  const Key key{m.layers,       m.dim,       m.seq,  m.vocab,      m.experts,  m.moe_every, pp,
                virtual_stages, int(m.arch), m.kv(), m.head_dim(), m.hidden(), m.tied()};
  std::lock_guard<std::mutex> lock(mu);
  auto it = memo.find(key);
  if (it == memo.end())
    it = memo.emplace(key, resolve_stage_layers(m, pp, virtual_stages, "")).first;
  return it->second;
}

ModelConfig with_engine_vocab(const PlanRequest& r) {
  ModelConfig m = r.model;
  if (!r.hardware.local) m.vocab = std::min(m.vocab, limits::kMaxVocab);
  return m;
}

void validate_request(const PlanRequest& r) {
  MT_REQUIRE(r.model.vocab >= 2, "--vocab must be >= 2 (got ", r.model.vocab, ")");
  with_engine_vocab(r).validate();
  MT_REQUIRE(r.model.dim <= INT32_MAX / 4, "--dim must be at most ", INT32_MAX / 4,
             " (the MLP's width, 4 x --dim, is an int; got ", r.model.dim, ")");
  // train's range: beyond it the search's per-expert tables took minutes, or all memory.
  MT_REQUIRE(r.model.experts <= limits::kMaxExperts, "--experts must be in 0..",
             limits::kMaxExperts, " (got ", r.model.experts, ")");
  MT_REQUIRE(r.batch >= 1, "--batch must be >= 1 (got ", r.batch, ")");
  MT_REQUIRE(r.devices >= 1, r.hardware.local ? "--ranks" : "--gpus", " must be >= 1 (got ",
             r.devices, ")");
  if (r.hardware.local) require_thread_count("--threads", r.threads);
  MT_REQUIRE(std::isfinite(r.bucket_mb) && r.bucket_mb > 0 && r.bucket_mb <= kMaxBucketMb,
             "--bucket-mb must be a finite number in (0, ", kMaxBucketMb, "] (got ", r.bucket_mb,
             ")");
  for (auto [name, v] : {std::pair{"--dp", r.dp},
                         {"--tp", r.tp},
                         {"--pp", r.pp},
                         {"--virtual-stages", r.virtual_stages},
                         {"--ep", r.ep},
                         {"--micro-batch", r.micro_batch},
                         {"--microbatches", r.microbatches},
                         {"--cp", r.cp}})
    MT_REQUIRE(!v || *v >= 1, name, " must be >= 1 (got ", *v, ")");
  MT_REQUIRE(!r.zero || (*r.zero >= 0 && *r.zero <= 3), "--zero must be 0, 1, 2 or 3 (got ",
             *r.zero, ")");
  MT_REQUIRE(r.mtp_layers >= 0 && r.mtp_layers <= kMaxMtpLayers, "--mtp-layers must be in 0..",
             kMaxMtpLayers, " (got ", r.mtp_layers, ")");
  MT_REQUIRE(r.mtp_layers == 0 || (!r.hardware.local && r.hardware.paper_memory), "--mtp-layers ",
             r.mtp_layers, ": software ", r.hardware.software,
             " has no multi-token prediction (the engine has none); plan it under a GPU "
             "software that has, e.g. --software deepseek-v3-2024 or megatron-bridge-2025");
  validate_mla_request(r);
}

void validate_mla_request(const PlanRequest& r) {
  if (!r.attention.is_mla()) return;
  validate_attention(r.attention);
  const ModelConfig& m = r.model;
  MT_REQUIRE(!r.hardware.local && r.hardware.paper_memory, "--attention mla: software ",
             r.hardware.software,
             " has no multi-head latent attention (the engine has none); plan it under a GPU "
             "software that has, e.g. --software deepseek-v3-2024 or megatron-bridge-2025");
  MT_REQUIRE(m.llama(), "--attention mla needs --arch llama (RMSNorm, RoPE, SwiGLU)");
  MT_REQUIRE(m.kv_heads == 0 || m.kv_heads == m.heads, "--kv-heads ", m.kv_heads,
             ": --attention mla has one key/value head per query head (--heads ", m.heads, ")");
  MT_REQUIRE(m.head_size == 0,
             "--head-dim does not apply to --attention mla (its heads are --qk-nope-head-dim + "
             "--qk-rope-head-dim wide, its values --v-head-dim)");
}

int microbatches(const PlanRequest& r, const Layout& l) {
  return l.per_replica() > 0 ? int(r.batch / l.per_replica()) : 0;
}

TrainOptions train_options(const PlanRequest& r, const Layout& l) {
  TrainOptions o;
  o.model = r.model;
  o.optim.batch = r.batch;
  o.optim.recompute = l.recompute;
  o.optim.threads = r.hardware.local ? r.threads : 1;
  // Locally the engine's own bf16 memory (bf16 slots, weight copies) is what a run holds;
  // GPU presets model bf16 memory in memory_model.cpp from the fp32 estimate.
  if (r.hardware.local) o.optim.precision = l.precision;
  o.parallel.dp = l.dp;
  o.parallel.tp = l.tp;
  o.parallel.pp = l.pp;
  o.parallel.ep = l.ep;
  // The engine's cp (a local plan is run by it, with its rules); GPU software's cp is its own
  // (validate_context_parallel), so train's rules see cp 1 there.
  if (r.hardware.local && l.cp > 1) {
    o.parallel.cp = l.cp;
    o.parallel.cp_comm = l.cp_comm;
  }
  // The engine's overlapped MoE exchange (plan --moe-overlap-parts): its memory counts too.
  if (r.hardware.local) o.parallel.moe_overlap_parts = r.hardware.a2a_overlap_parts;
  o.parallel.zero = l.zero;
  o.parallel.sequence_parallel = l.sequence_parallel;
  o.parallel.schedule = schedule_kind(l.schedule);
  o.parallel.virtual_stages = l.virtual_stages;
  o.parallel.bucket_mb = r.bucket_mb;
  o.parallel.microbatches = microbatches(r, l);
  o.engine.backend = r.hardware.local && r.backend == "local" ? Backend::local : Backend::mpi;
  o.vocab_given = o.seq_given = true;
  // The default partition, spelled out (the same blocks per chunk train would choose), so
  // that the memory estimate does not partition again for every candidate.
  if (l.pp > 1 && l.virtual_stages >= 1 && int64_t(l.pp) * l.virtual_stages <= r.model.layers) {
    std::string spec;
    for (int n : default_stage_layers(r.model, l.pp, l.virtual_stages)) {
      if (!spec.empty()) spec += ',';
      spec += std::to_string(n);
    }
    o.parallel.stage_layers = spec;
  }
  return o;
}

// Context parallelism as the software has it (docs/contracts.md §11's zigzag: 2 cp chunks of
// the sequence).
void validate_context_parallel(const PlanRequest& r, const Layout& l) {
  MT_REQUIRE(l.cp >= 1, "--cp must be >= 1 (got ", l.cp, ")");
  if (l.cp == 1) return;
  MT_REQUIRE(l.cp <= r.hardware.max_cp, "--cp ", l.cp, ": software ", r.hardware.software,
             r.hardware.max_cp > 1 ? str(" has at most --cp ", r.hardware.max_cp)
                                   : std::string(" has no context parallelism"),
             " (--software llama3-2024 has)");
  MT_REQUIRE(r.model.seq % (2 * int64_t(l.cp)) == 0, "--seq ", r.model.seq,
             " must be divisible by 2 x --cp = ", 2 * int64_t(l.cp),
             " (each cp rank holds two of the 2 cp chunks)");
}

void validate_candidate(const PlanRequest& r, const Layout& l) {
  MT_REQUIRE(l.micro_batch >= 1, "--micro-batch must be >= 1 (got ", l.micro_batch, ")");
  MT_REQUIRE(l.dp >= 1, "--dp must be >= 1 (got ", l.dp, ")");
  MT_REQUIRE(l.world() == r.devices,
             l.cp > 1 ? "--dp x --cp x --tp x --pp = " : "--dp x --tp x --pp = ", l.world(),
             " but ", r.hardware.local ? "--ranks is " : "--gpus is ", r.devices);
  validate_context_parallel(r, l);
  MT_REQUIRE(r.batch % l.per_replica() == 0, "--batch ", r.batch,
             " must be divisible by --dp x --micro-batch = ", l.per_replica());
  // The engine counts a microbatch's tokens in an int.
  MT_REQUIRE(int64_t(l.micro_batch) * r.model.seq <= INT32_MAX, "--micro-batch ", l.micro_batch,
             " x --seq ", r.model.seq, " tokens per microbatch is more than 2^31 - 1");
  // Local bf16 needs the calibrated bf16 GEMM, conversion and attention figures; a profile
  // written before they were measured has none.
  MT_REQUIRE(l.precision == Precision::fp32 || !r.hardware.local || has_local_bf16(r.hardware),
             "--precision bf16: the local hardware profile has no bf16 figures (written before "
             "they were calibrated, or this CPU has no bf16 matmul); run 'meshtrain plan "
             "--calibrate' to measure them");
  MT_REQUIRE(l.precision == Precision::fp32 || r.hardware.peak_bf16 > 0, "hardware '",
             r.hardware.name, "' has no bf16 rate");
  MT_REQUIRE(!r.hardware.fp8_gemms || r.hardware.local || l.precision != Precision::bf16 ||
                 r.hardware.peak_fp8 > 0,
             "software '", r.hardware.software, "' runs its GEMMs in FP8; hardware '",
             r.hardware.name, "' has no FP8 rate (peak_fp8)");
  // A local plan is run by this engine, whose capacity applies; GPU software counts for itself.
  TrainOptions o = train_options(r, l);
  if (r.hardware.local) {
    validate_train_options(o);
  } else {
    o.model = with_engine_vocab(r);
    validate_layout_rules(o);
  }
}

std::string train_command(const PlanRequest& r, const Layout& l) {
  const ModelConfig& m = r.model;
  std::string c =
      str("meshtrain train", m.llama() ? " --arch llama" : "", " --layers ", m.layers, " --dim ",
          m.dim, " --heads ", m.heads, " --seq ", m.seq, " --vocab ", m.vocab);
  if (m.llama()) {
    if (m.kv() != m.heads) c += str(" --kv-heads ", m.kv());
    if (m.head_size > 0) c += str(" --head-dim ", m.head_size);
    if (m.ffn_dim > 0) c += str(" --ffn-dim ", m.ffn_dim);
    if (m.tie_embeddings) c += " --tie-embeddings";
    if (m.rope_theta != ModelConfig{}.rope_theta) c += str(" --rope-theta ", m.rope_theta);
    if (m.norm_eps != ModelConfig{}.norm_eps) c += str(" --norm-eps ", m.norm_eps);
  }
  if (m.experts > 0) {
    c += str(" --experts ", m.experts, " --topk ", m.topk,
             m.moe_every != 1 ? str(" --moe-every ", m.moe_every) : std::string());
    if (m.expert_ffn_dim > 0) c += str(" --expert-ffn-dim ", m.expert_ffn_dim);
    if (m.shared_experts > 0) c += str(" --shared-experts ", m.shared_experts);
    if (m.first_dense_layers > 0) c += str(" --first-dense-layers ", m.first_dense_layers);
    if (m.router == RouterScore::sigmoid) c += " --router sigmoid";
  }
  c += str(" --batch ", r.batch, " --dp ", l.dp, " --tp ", l.tp, " --pp ", l.pp);
  if (l.ep > 1) c += str(" --ep ", l.ep);
  if (r.hardware.local && r.hardware.a2a_overlap_parts > 1)
    c += str(" --moe-overlap-parts ", r.hardware.a2a_overlap_parts);
  c += str(" --microbatches ", microbatches(r, l));
  if (l.pp > 1) c += str(" --schedule ", l.schedule);
  if (l.virtual_stages > 1) c += str(" --virtual-stages ", l.virtual_stages);
  if (l.cp > 1) c += str(" --cp ", l.cp, " --cp-comm ", cp_comm_name(l.cp_comm));
  if (l.zero > 0) c += str(" --zero ", l.zero);
  if (l.sequence_parallel) c += " --sequence-parallel";
  if (l.recompute != Recompute::none) c += str(" --recompute ", recompute_name(l.recompute));
  if (l.precision != Precision::fp32) c += str(" --precision ", precision_name(l.precision));
  if (r.hardware.local) {
    if (r.threads > 1) c += str(" --threads ", r.threads);
    if (r.backend == "mpi") c = str("mpirun -np ", l.world(), " ", c, " --backend mpi");
  } else {
    c = str("mpirun -np ", l.world(), " ", c, " --backend mpi");
  }
  return c;
}

}  // namespace mt::plan
