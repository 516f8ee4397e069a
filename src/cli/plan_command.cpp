// `meshtrain plan`: parses the model, batch, hardware and any fixed layout knobs into a
// PlanRequest and prints what plan/ predicts; `--calibrate` measures this machine into a
// local hardware profile. The logic lives in src/plan/.
#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "core/input_file.h"
#include "plan/calibrate.h"
#include "plan/compare.h"
#include "plan/plan_report.h"
#include "train/option_limits.h"

namespace mt {

namespace {

struct PlanArgs {
  ModelConfig model;
  std::string arch = "gpt2";       // --arch (parsed into model.arch in make_request)
  std::string router = "softmax";  // --router (parsed into model.router in make_request)
  int batch = 8;
  std::string hardware, hardware_file, profile, backend = "local";
  std::string software;  // GPU software profile (empty: the hardware's own, meshtrain)
  int gpus = 0, ranks = 0, threads = 1, top = 10, mtp_layers = 0;
  int moe_overlap_parts = 1;  // --moe-overlap-parts (local: the engine's; GPU: the software's)
  CLI::Option* overlap_o = nullptr;
  double bucket_mb = 25;
  int dp = 0, tp = 0, pp = 0, virtual_stages = 0, ep = 0, zero = -1, micro_batch = 0, cp = 0;
  std::string recompute, schedule, precision, cp_comm, attention = "mha";
  plan::MlaShape mla;
  std::vector<CLI::Option*> mla_o;
  std::vector<std::string> compare;  // --compare SPEC, repeated
  bool json = false, explain = false, calibrate = false;
  double calibrate_seconds = 60;
  CLI::Option *dp_o, *tp_o, *pp_o, *v_o, *ep_o, *zero_o, *mb_o, *sp_o, *rc_o, *sched_o, *prec_o,
      *cp_o, *cp_comm_o;
  bool sp = false;
  std::string config;
  CLI::App* cmd = nullptr;
};

// One integer of the config file, when present: a TOML integer within int's range (then
// checked as the flag it stands for is), never narrowed silently.
void config_int(const toml::node* n, const std::string& path, const std::string& key, int& out) {
  if (!n) return;
  const auto v = n->as_integer();
  MT_REQUIRE(v, "--config ", path, ": ", key, " must be an integer");
  MT_REQUIRE(v->get() >= INT32_MIN && v->get() <= INT32_MAX, "--config ", path, ": ", key,
             " is out of range (got ", v->get(), ")");
  out = int(v->get());
}

// --config's [model] arch, rope-theta, norm-eps and tie-embeddings (train's names), for each
// not given as a flag.
template <typename Unset>
void config_llama(const toml::table& doc, PlanArgs& a, const Unset& unset) {
  const toml::node* arch = doc["model"]["arch"].node();
  if (arch && unset("arch")) {
    const auto v = arch->value<std::string>();
    MT_REQUIRE(v, "--config ", a.config, ": [model] arch must be a string");
    a.arch = *v;
  }
  if (const toml::node* n = doc["model"]["tie-embeddings"].node(); n && unset("tie-embeddings")) {
    const auto v = n->value<bool>();
    MT_REQUIRE(v, "--config ", a.config, ": [model] tie-embeddings must be true or false");
    a.model.tie_embeddings = *v;
  }
  for (auto [name, target] : {std::pair{"rope-theta", &a.model.rope_theta}}) {
    const toml::node* n = doc["model"][name].node();
    if (!n || !unset(name)) continue;
    const auto v = n->value<double>();
    MT_REQUIRE(v, "--config ", a.config, ": [model] ", name, " must be a number");
    *target = *v;
  }
  if (const toml::node* n = doc["model"]["norm-eps"].node(); n && unset("norm-eps")) {
    const auto v = n->value<double>();
    MT_REQUIRE(v, "--config ", a.config, ": [model] norm-eps must be a number");
    a.model.norm_eps = float(*v);
  }
}

// --config FILE.toml: the [model] table and [train] batch of a train config file, for
// every one of them not given as a flag (flags override the file, as in train).
void apply_config(PlanArgs& a) {
  if (a.config.empty()) return;
  toml::table doc;
  try {
    doc = toml::parse(read_input_file("--config", a.config, kMaxJsonInputBytes), a.config);
  } catch (const toml::parse_error& e) {
    throw UsageError(str("cannot read --config ", a.config, ": ", e.description()));
  }
  ModelConfig& m = a.model;
  const std::pair<const char*, int*> ints[] = {{"layers", &m.layers},
                                               {"dim", &m.dim},
                                               {"heads", &m.heads},
                                               {"seq", &m.seq},
                                               {"vocab", &m.vocab},
                                               {"experts", &m.experts},
                                               {"topk", &m.topk},
                                               {"moe-every", &m.moe_every},
                                               {"kv-heads", &m.kv_heads},
                                               {"head-dim", &m.head_size},
                                               {"ffn-dim", &m.ffn_dim},
                                               {"expert-ffn-dim", &m.expert_ffn_dim},
                                               {"shared-experts", &m.shared_experts},
                                               {"first-dense-layers", &m.first_dense_layers}};
  auto unset = [&](const char* name) { return a.cmd->get_option(str("--", name))->count() == 0; };
  for (auto [name, target] : ints)
    if (unset(name))
      config_int(doc["model"][name].node(), a.config, str("[model] ", name), *target);
  config_llama(doc, a, unset);
  if (a.cmd->get_option("--batch")->count() == 0)
    config_int(doc["train"]["batch"].node(), a.config, "[train] batch", a.batch);
}

template <typename T>
std::optional<T> given(CLI::Option* o, const T& v) {
  return o->count() > 0 ? std::optional<T>(v) : std::nullopt;
}

plan::PlanRequest make_request(PlanArgs& a) {
  apply_config(a);
  MT_REQUIRE(parse_arch(a.arch, &a.model.arch), "--arch must be gpt2 or llama (got '", a.arch,
             "')");
  MT_REQUIRE(a.router == "softmax" || a.router == "sigmoid",
             "--router must be softmax or sigmoid (got '", a.router, "')");
  a.model.router = a.router == "sigmoid" ? RouterScore::sigmoid : RouterScore::softmax;
  plan::PlanRequest r;
  r.model = a.model;
  MT_REQUIRE(a.batch >= 1, "--batch must be >= 1 (got ", a.batch, ")");
  r.batch = a.batch;
  MT_REQUIRE(a.hardware.empty() != a.hardware_file.empty() || a.hardware == "local",
             "give --hardware NAME (a100-80gb, h100-80gb, h800-80gb, local) or --hardware-file "
             "FILE.toml");
  if (!a.hardware_file.empty()) {
    r.hardware = plan::load_profile(a.hardware_file);
  } else if (a.hardware == "local") {
    const std::string path = a.profile.empty() ? plan::default_local_profile_path() : a.profile;
    r.hardware = plan::for_backend(plan::load_local_profile(path), a.backend);
    r.backend = a.backend;
  } else {
    r.hardware = plan::preset_profile(a.hardware);
  }
  if (!a.software.empty()) {
    MT_REQUIRE(!r.hardware.local,
               "--software applies to GPU hardware (the local profile is "
               "meshtrain's own engine, as calibrated)");
    plan::apply_software(r.hardware, a.software);
  }
  r.devices = a.gpus > 0 ? a.gpus : a.ranks;
  MT_REQUIRE(r.devices >= 1,
             r.hardware.local ? "--ranks N (or --gpus N) is required" : "--gpus N is required");
  MT_REQUIRE(std::isfinite(a.bucket_mb) && a.bucket_mb > 0,
             "--bucket-mb must be a finite number > 0 (got ", a.bucket_mb, ")");
  MT_REQUIRE(a.threads >= 1, "--threads must be >= 1");
  MT_REQUIRE(a.top >= 1, "--top must be >= 1");
  r.threads = a.threads;
  if (a.overlap_o->count() > 0) {
    MT_REQUIRE(r.hardware.local,
               "--moe-overlap-parts applies to --hardware local (GPU software: its "
               "a2a_overlap_parts field)");
    MT_REQUIRE(a.moe_overlap_parts >= 1 && a.moe_overlap_parts <= limits::kMaxOverlapParts,
               "--moe-overlap-parts must be in [1, ", limits::kMaxOverlapParts, "] (got ",
               a.moe_overlap_parts, ")");
    r.hardware.a2a_overlap_parts = a.moe_overlap_parts;
  }
  r.bucket_mb = a.bucket_mb;
  r.mtp_layers = a.mtp_layers;
  r.attention.family = plan::attention_family_of(a.attention);
  for (const CLI::Option* o : a.mla_o)
    MT_REQUIRE(o->count() == 0 || r.attention.is_mla(), o->get_name(),
               " applies to --attention mla");
  r.attention.mla = a.mla;
  r.dp = given(a.dp_o, a.dp);
  r.tp = given(a.tp_o, a.tp);
  r.pp = given(a.pp_o, a.pp);
  r.virtual_stages = given(a.v_o, a.virtual_stages);
  r.ep = given(a.ep_o, a.ep);
  r.zero = given(a.zero_o, a.zero);
  r.micro_batch = given(a.mb_o, a.micro_batch);
  r.sequence_parallel = given(a.sp_o, a.sp);
  if (a.rc_o->count() > 0) r.recompute = plan::recompute_of(a.recompute);
  r.schedule = given(a.sched_o, a.schedule);
  if (a.prec_o->count() > 0) r.precision = plan::precision_of(a.precision);
  r.cp = given(a.cp_o, a.cp);
  if (a.cp_comm_o->count() > 0) r.cp_comm = plan::cp_comm_of(a.cp_comm);
  plan::validate_request(r);
  return r;
}

// --compare: the layouts side by side (plan/compare.h); --explain adds the assumptions and
// each one's breakdown.
int run_compare(const PlanArgs& a, const plan::PlanRequest& r) {
  const std::vector<plan::Compared> c = plan::compare_layouts(r, a.compare);
  if (a.json) {
    std::cout << plan::compare_json(r, c);
    return 0;
  }
  plan::print_compare(std::cout, r, c);
  if (a.explain) {
    plan::SearchResult s;
    for (const plan::Compared& x : c) s.candidates.push_back(x.best);
    plan::print_explain(std::cout, r, s, int(c.size()));
  }
  return 0;
}

int run_plan(PlanArgs& a) {
  // Checked with or without --calibrate: a value given is never silently ignored as bad.
  MT_REQUIRE(std::isfinite(a.calibrate_seconds) && a.calibrate_seconds > 0,
             "--calibrate-seconds must be a finite number > 0 (got ", a.calibrate_seconds, ")");
  MT_REQUIRE(a.calibrate_seconds <= 86400, "--calibrate-seconds must be at most 86400 (a day; got ",
             a.calibrate_seconds, ")");
  if (a.calibrate) {
    const std::string path = a.profile.empty() ? plan::default_local_profile_path() : a.profile;
    plan::calibrate_local(path, a.calibrate_seconds, std::cout);
    return 0;
  }
  const plan::PlanRequest r = make_request(a);
  if (!a.compare.empty()) return run_compare(a, r);
  const plan::SearchResult s = plan::search_layouts(r, size_t(std::max(a.top, 2)));
  if (a.json) {
    std::cout << plan::plan_json(r, s, a.top);
    return 0;
  }
  plan::print_table(std::cout, r, s, a.top);
  if (a.explain) plan::print_explain(std::cout, r, s, a.top);
  return 0;
}

// The layout knobs a user fixes (unset: searched) and --compare's layouts.
void add_layout_flags(CLI::App* cmd, PlanArgs& a) {
  a.dp_o = cmd->add_option("--dp", a.dp, "fix data parallelism (else searched)");
  a.tp_o = cmd->add_option("--tp", a.tp, "fix tensor parallelism");
  a.pp_o = cmd->add_option("--pp", a.pp, "fix pipeline stages");
  a.v_o = cmd->add_option("--virtual-stages", a.virtual_stages, "fix chunks per stage");
  a.ep_o = cmd->add_option("--ep", a.ep, "fix expert parallelism");
  a.cp_o = cmd->add_option("--cp", a.cp,
                           "fix context parallelism (GPU software that has it, e.g. "
                           "--software llama3-2024; else 1)");
  a.cp_comm_o =
      cmd->add_option("--cp-comm", a.cp_comm, "fix ring | allgather (default: the software's)");
  a.zero_o = cmd->add_option("--zero", a.zero, "fix the ZeRO stage");
  a.sp_o = cmd->add_flag("--sequence-parallel{true}", a.sp,
                         "fix sequence parallelism (--sequence-parallel=false to forbid it)");
  a.rc_o = cmd->add_option("--recompute", a.recompute, "fix none|selective|full");
  a.mb_o = cmd->add_option("--micro-batch", a.micro_batch, "fix sequences per microbatch");
  a.sched_o = cmd->add_option("--schedule", a.schedule, "fix the pipeline schedule");
  a.prec_o = cmd->add_option("--precision", a.precision,
                             "fix fp32|bf16 (GPU presets: searched; local: fp32 unless given, "
                             "bf16 needs a calibrated profile)");
  cmd->add_option("--compare", a.compare,
                  "SPEC, given two or more times: those layouts side by side (step split into "
                  "compute, exposed tp/cp/ep/ZeRO-3/dp comm, bubble and optimizer; memory by "
                  "kind; ratio to the best). SPEC is key=value,... of dp tp pp cp ep zero "
                  "virtual-stages micro-batch schedule recompute precision cp-comm "
                  "sequence-parallel, over the fixed flags; what it leaves open is searched")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

// A model part the engine does not have, so not among train's model flags.
void add_mtp_flag(CLI::App* cmd, PlanArgs& a) {
  cmd->add_option("--mtp-layers", a.mtp_layers,
                  "multi-token-prediction modules (DeepSeek-V3's MTP depth D), costed on the "
                  "head's stage: a block like the last, a 2h -> h projection, the shared head "
                  "and loss again (GPU software with paper memory only; the engine has none)")
      ->capture_default_str();
}

// Multi-head latent attention (the engine has none): the family and its widths, named as
// DeepSeek's released configs name them.
void add_attention_flags(CLI::App* cmd, PlanArgs& a) {
  cmd->add_option("--attention", a.attention,
                  "attention family: mha (multi-head / grouped-query, the engine's) | mla "
                  "(DeepSeek's multi-head latent attention; GPU software with paper memory, "
                  "--arch llama)")
      ->capture_default_str();
  const std::pair<const char*, int*> widths[] = {{"--q-lora-rank", &a.mla.q_lora_rank},
                                                 {"--kv-lora-rank", &a.mla.kv_lora_rank},
                                                 {"--qk-nope-head-dim", &a.mla.qk_nope_head_dim},
                                                 {"--qk-rope-head-dim", &a.mla.qk_rope_head_dim},
                                                 {"--v-head-dim", &a.mla.v_head_dim}};
  for (const auto& [flag, value] : widths)
    a.mla_o.push_back(cmd->add_option(flag, *value,
                                      "--attention mla: as the model config's field of that "
                                      "name (default: DeepSeek-V3's; q-lora-rank 0: no query "
                                      "compression)")
                          ->capture_default_str());
}

// The model the plan is for: train's [model] flags, the same names and meanings.
void add_model_flags(CLI::App* cmd, PlanArgs& a) {
  ModelConfig& m = a.model;
  cmd->add_option("--config", a.config,
                  "a train config file: its [model] table and [train] batch (flags override)");
  cmd->add_option("--layers", m.layers, "transformer blocks")->capture_default_str();
  cmd->add_option("--dim", m.dim, "model width")->capture_default_str();
  cmd->add_option("--heads", m.heads, "attention heads")->capture_default_str();
  cmd->add_option("--seq", m.seq, "sequence length")->capture_default_str();
  cmd->add_option("--vocab", m.vocab, "vocabulary size")->capture_default_str();
  cmd->add_option("--experts", m.experts, "experts per MoE layer (0 = dense)")
      ->capture_default_str();
  cmd->add_option("--topk", m.topk, "experts per token")->capture_default_str();
  cmd->add_option("--moe-every", m.moe_every, "every k-th block is MoE")->capture_default_str();
  cmd->add_option("--expert-ffn-dim", m.expert_ffn_dim,
                  "llama MoE: routed experts' SwiGLU width (0 = --ffn-dim)")
      ->capture_default_str();
  cmd->add_option("--shared-experts", m.shared_experts,
                  "llama MoE: shared experts, one SwiGLU of width S x expert width on every token")
      ->capture_default_str();
  cmd->add_option("--first-dense-layers", m.first_dense_layers,
                  "llama MoE: layers 0..N-1 keep the dense MLP")
      ->capture_default_str();
  cmd->add_option("--router", a.router,
                  "llama MoE: softmax | sigmoid (as train; a pointwise pass either way, the plan "
                  "is the same)")
      ->capture_default_str();
  cmd->add_option("--arch", a.arch, "block architecture: gpt2 | llama (as train)")
      ->capture_default_str();
  cmd->add_option("--kv-heads", m.kv_heads, "llama: key/value heads (0 = --heads)")
      ->capture_default_str();
  cmd->add_option("--head-dim", m.head_size, "llama: width of one head (0 = dim/heads)")
      ->capture_default_str();
  cmd->add_option("--ffn-dim", m.ffn_dim, "llama: SwiGLU width (0 = 256 * ceil((8C/3) / 256))")
      ->capture_default_str();
  cmd->add_flag("--tie-embeddings{true}", m.tie_embeddings,
                "llama: the head multiplies the token table (no lm_head)");
  cmd->add_option("--rope-theta", m.rope_theta, "llama: RoPE base theta (no effect on the plan)")
      ->capture_default_str();
  cmd->add_option("--norm-eps", m.norm_eps, "llama: RMSNorm epsilon (no effect on the plan)")
      ->capture_default_str();
}

// The model parts the planner describes and the engine has not (MTP, MLA).
void add_plan_only_model_flags(CLI::App* cmd, PlanArgs& a) {
  add_mtp_flag(cmd, a);
  add_attention_flags(cmd, a);
}

}  // namespace

CommandRunner add_plan_command(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "choose the layout: search the parallel layouts for a model, batch and hardware, "
      "predict step time and memory per device (docs/planner.md)");
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  a->cmd = cmd;
  add_model_flags(cmd, *a);
  cmd->add_option("--batch", a->batch, "global batch in sequences")->capture_default_str();
  cmd->add_option("--hardware", a->hardware,
                  "a100-80gb | h100-80gb | h800-80gb | local (calibrated)");
  cmd->add_option("--hardware-file", a->hardware_file, "a TOML hardware profile");
  cmd->add_option("--software", a->software,
                  "GPU training software the plan models: meshtrain (default), "
                  "megatron-lm-2021, megatron-lm-2022, llama3-2024, deepseek-v3-2024, "
                  "megatron-bridge-2025, megascale-2024, megatron-core-2024 (docs/planner.md)");
  cmd->add_option("--profile", a->profile,
                  "the local profile file (--calibrate writes it, --hardware local reads it; "
                  "default $XDG_CACHE_HOME/meshtrain/hardware-local.toml)");
  cmd->add_option("--gpus", a->gpus, "devices (GPUs, or ranks for --hardware local)");
  cmd->add_option("--ranks", a->ranks, "ranks (same as --gpus)");
  cmd->add_option("--backend", a->backend,
                  "local: ranks as threads; mpi: one process per rank (--hardware local: "
                  "which calibrated links the run uses)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "compute threads per rank (local)")
      ->capture_default_str();
  cmd->add_option("--bucket-mb", a->bucket_mb, "gradient bucket size in MiB")
      ->capture_default_str();
  a->overlap_o = cmd->add_option("--moe-overlap-parts", a->moe_overlap_parts,
                                 "--hardware local: train's --moe-overlap-parts (the MoE "
                                 "exchanges pipelined over N parts of each microbatch, priced "
                                 "as the engine overlaps them; docs/planner.md)");
  add_plan_only_model_flags(cmd, *a);
  add_layout_flags(cmd, *a);
  cmd->add_option("--top", a->top, "candidates to print")->capture_default_str();
  cmd->add_flag("--json", a->json, "print {\"candidates\": [...]} (best first)");
  cmd->add_flag("--explain", a->explain, "print every assumption and the breakdown");
  cmd->add_flag("--calibrate", a->calibrate,
                "measure this machine (GEMMs, memory-bound kernels, collectives) into the "
                "local profile");
  cmd->add_option("--calibrate-seconds", a->calibrate_seconds, "time budget of --calibrate")
      ->capture_default_str();
  return [a]() { return run_plan(*a); };
}

}  // namespace mt
