// `meshtrain train`: flags and config file -> TrainOptions -> ranks -> train_rank.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flag_set.h"
#include "cli/train_flags.h"
#include "cli/train_setup.h"
#include "comm/backend.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/threads.h"
#include "model/context_parallel_shard.h"
#include "parallel/data_parallel/replica_sync.h"
#include "schedule/schedule.h"
#include "train/hf_config.h"
#include "train/option_limits.h"

namespace mt {

namespace {

using namespace limits;

// The TOML file must be applied before the flags are registered, so that --help shows the
// file's values as defaults and flags given on the command line override them. Every
// occurrence is returned: a second one would otherwise be ignored without a word.
std::vector<std::string> find_config_args(int argc, char** argv) {
  std::vector<std::string> found;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--config") == 0) found.push_back(i + 1 < argc ? argv[i + 1] : "");
    if (std::strncmp(argv[i], "--config=", 9) == 0) found.push_back(argv[i] + 9);
  }
  return found;
}

// Applies the one --config file; a problem becomes the message of a UsageError raised
// when the command runs (--help still works with a bad file).
std::string apply_config(const std::vector<std::string>& configs, FlagSet& flags) {
  if (configs.empty()) return "";
  if (configs.size() > 1)
    return str("--config is given ", configs.size(),
               " times; give one file (flags on the command line override its values)");
  try {
    require_input_file("--config", configs[0]);
    flags.load_toml(configs[0]);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// --arch llama's knobs (section 9); 0 means each one's default.
void define_llama_flags(FlagSet& f, ModelConfig& m) {
  f.add("model", "kv-heads", &m.kv_heads,
        "llama: key/value heads (grouped-query attention; must divide --heads; 1 = multi-query; "
        "0 = --heads)",
        {0, kMaxDim});
  f.add("model", "head-dim", &m.head_size,
        "llama: width of one attention head (0 = dim/heads; even, <= 512)", {0, 512});
  f.add("model", "ffn-dim", &m.ffn_dim, "llama: SwiGLU width F (0 = 256 * ceil((8C/3) / 256))",
        {0, kMaxFfnDim});
  f.add("model", "rope-theta", &m.rope_theta, "llama: RoPE base theta",
        {1, kMaxFloat, /*min_exclusive=*/true});
  f.add("model", "norm-eps", &m.norm_eps, "llama: RMSNorm epsilon", {0, 1, /*min_exclusive=*/true});
  f.add_bool("model", "tie-embeddings", &m.tie_embeddings,
             "llama: the head multiplies the token table (no lm_head.weight; gpt2 always ties)");
}

// --arch llama's mixture of experts, DeepSeek-V3 style (section 9; docs/moe.md).
void define_llama_moe_flags(FlagSet& f, ModelConfig& m) {
  f.add("model", "expert-ffn-dim", &m.expert_ffn_dim,
        "llama MoE: each routed expert's SwiGLU width Fe (0 = --ffn-dim)", {0, kMaxFfnDim});
  f.add("model", "shared-experts", &m.shared_experts,
        "llama MoE: shared experts S, one SwiGLU of width S x Fe on every token, added to the "
        "routed output (0 = none)",
        {0, kMaxExperts});
  f.add("model", "first-dense-layers", &m.first_dense_layers,
        "llama MoE: layers 0..N-1 keep the dense MLP", {0, kMaxLayers});
  f.add_choice("model", "router", &m.router,
               "llama MoE: softmax (top-k of the softmax, gates renormalised when topk > 1) or "
               "sigmoid (DeepSeek-V3: top-k of sigmoid scores, gates divided by their sum)",
               {{"softmax", RouterScore::softmax}, {"sigmoid", RouterScore::sigmoid}});
  f.add("model", "routed-scale", &m.routed_scale,
        "llama MoE: the routed experts' gates are multiplied by this (both routers)",
        {0, kMaxFloat, /*min_exclusive=*/true});
}

// One function per group of --help and of the config file's tables.
void define_model_flags(FlagSet& f, ModelConfig& m) {
  f.add_choice("model", "arch", &m.arch,
               "block architecture: gpt2 (LayerNorm, learned positions, GELU MLP of 4C, tied "
               "head) or llama (RMSNorm, RoPE, grouped-query attention, SwiGLU, no biases, "
               "untied head; docs/contracts.md section 9)",
               {{"gpt2", Arch::gpt2}, {"llama", Arch::llama}});
  f.add("model", "layers", &m.layers, "transformer blocks", {1, kMaxLayers});
  f.add("model", "dim", &m.dim, "model width C", {1, kMaxDim});
  f.add("model", "heads", &m.heads, "attention heads (must divide --dim)", {1, kMaxDim});
  f.add("model", "seq", &m.seq, "context length T (rows of the position table)", {1, kMaxSeq});
  f.add("model", "vocab", &m.vocab,
        "vocabulary size (default: 256, or max token id + 1 of the data / the --init-from file)",
        {2, kMaxVocab});
  f.add("model", "experts", &m.experts, "mixture-of-experts experts per MoE layer (0 = dense)",
        {0, kMaxExperts});
  f.add("model", "topk", &m.topk, "experts per token (MoE)", {1, kMaxExperts});
  f.add("model", "capacity-factor", &m.capacity_factor, "MoE capacity factor (0 = dropless)",
        {0, kMaxFloat});
  f.add("model", "aux-loss-coef", &m.aux_loss_coef, "MoE load-balancing loss coefficient",
        {0, kMaxFloat});
  f.add("model", "dropout", &m.dropout,
        "dropout probability in training (nanoGPT's: embeddings, attention probabilities, "
        "residual branches; both archs, fp32 and bf16), masks the same in every layout, cp "
        "included; evaluation and sampling never drop; 0 = off; below 1",
        {0, 1});
  f.add("model", "moe-every", &m.moe_every, "every k-th block is MoE", {1, kMaxLayers});
  f.add("model", "router-bias-update", &m.router_bias_update,
        "aux-loss-free balancing bias step gamma (0 = off)", {0, kMaxFloat});
  define_llama_flags(f, m);
  define_llama_moe_flags(f, m);
}

void define_parallel_flags(FlagSet& f, ParallelOptions& p) {
  f.add("parallel", "dp", &p.dp,
        "data-parallel replicas: each trains on 1/dp of the global batch (same tokens and "
        "losses as one worker); gradients are averaged in buckets reduced during backward",
        {1, kMaxRanks});
  f.add("parallel", "tp", &p.tp,
        "tensor-parallel ranks (Megatron): attention heads and the MLP split over tp (must "
        "divide --heads), the tied embedding/LM head split by vocabulary rows (padded to a "
        "multiple of tp, never in a file); world = dp x tp, tp ranks adjacent",
        {1, kMaxRanks});
  f.add("parallel", "pp", &p.pp, "pipeline stages", {1, kMaxRanks});
  f.add("parallel", "ep", &p.ep, "expert-parallel ranks (divides --dp)", {1, kMaxRanks});
  f.add("parallel", "moe-overlap-parts", &p.moe_overlap_parts,
        "MoE layers: cut each microbatch's tokens into N parts whose expert all-to-alls run "
        "while the experts compute another part (with N >= 3 the first and the last half the "
        "others' size), so that at best 1/(2N-2) of them stays exposed (1/2 at N = 2; 1 = one "
        "blocking exchange each way); losses equal to one worker's to rounding",
        {1, kMaxOverlapParts});
  f.add("parallel", "cp", &p.cp,
        "context-parallel ranks: each sequence is cut into 2cp chunks and rank r of the cp "
        "group holds chunks r and 2cp-1-r (zigzag); attention crosses the group (--cp-comm); "
        "the same losses and gradients as --cp 1. --seq divisible by 2cp; "
        "world = pp x dp x cp x tp, rank order tp, cp, dp, pp",
        {1, kMaxRanks});
  f.add_choice("parallel", "cp-comm", &p.cp_comm,
               "with --cp > 1: ring (K/V blocks passed around the cp ring, each transfer "
               "overlapped with the attention of the block in hand; dK/dV travel back) | "
               "allgather (K/V all-gathered once per layer, dK/dV reduce-scattered)",
               cp_comm_names(), ChoiceRefusal::in_words);
  f.add("parallel", "microbatches", &p.microbatches,
        "microbatches per step per replica (gradient accumulation; --batch must be divisible "
        "by dp * microbatches)",
        {1, kMaxBatch});
  f.add_parsed<ScheduleKind>(
      "parallel", "schedule", &p.schedule, "pipeline schedule: " + schedule_names_joined("|", "|"),
      schedule_names_joined("|", "|"),
      [](const std::string& text, const std::string&) { return schedule_kind(text); },
      [](const ScheduleKind& k) { return std::string(schedule_name(k)); });
  f.add("parallel", "virtual-stages", &p.virtual_stages, "model chunks per pipeline rank",
        {1, kMaxLayers});
  f.add("parallel", "stage-layers", &p.stage_layers,
        "blocks per pipeline model chunk, e.g. 3,4,4,3 (pp x virtual-stages counts summing to "
        "--layers); default: balanced by compute, the head counted on the last chunk");
  f.add("parallel", "zero", &p.zero,
        "ZeRO stage over the dp group (model state per rank, N = dp, P = parameters): "
        "0 none (16P bytes), 1 AdamW moments sharded (8P + 8P/N), 2 + gradients sharded "
        "(4P + 12P/N), 3 + parameters sharded, each layer gathered when used (16P/N)",
        {0, 3});
  f.add_bool("parallel", "sequence-parallel", &p.sequence_parallel,
             "with --tp > 1: LayerNorms and residuals run on 1/tp of each microbatch's tokens "
             "(all-reduces become all-gathers + reduce-scatters; less activation memory); "
             "batch/(dp x microbatches) x seq must be divisible by tp");
  f.add("parallel", "bucket-mb", &p.bucket_mb,
        "gradient bucket size in MiB: layers' gradients are grouped, last layer first, and "
        "each bucket is reduced as soon as backward has finished it (ZeRO-3: one per layer)",
        {0, kMaxBucketMb, true});
  f.add_bool("parallel", "auto-layout", &p.auto_layout,
             "let the planner choose the layout knobs not given here for --ranks ranks, from "
             "the local profile of 'meshtrain plan --calibrate' (prints its choice and why)");
  f.add("parallel", "ranks", &p.ranks, "ranks to lay out with --auto-layout", {0, kMaxRanks});
  f.add_parsed<DpSync>(
      "parallel", "dp-sync", &p.dp_sync,
      "every-step (synchronous dp) | local:H (local SGD: replicas step on their own "
      "gradients, every H-th step is synchronous and the weights are averaged) | diloco:H "
      "(H local steps, then an outer Nesterov step on the averaged change); --zero 0",
      "every-step|local:H|diloco:H",
      [](const std::string& text, const std::string&) { return dp_sync_from_flag(text); },
      dp_sync_text);
  f.add("parallel", "outer-lr", &p.outer_lr, "diloco: outer learning rate", {0, kMaxFloat, true});
  f.add("parallel", "outer-momentum", &p.outer_momentum, "diloco: outer Nesterov momentum", {0, 1});
}

void define_optim_flags(FlagSet& f, OptimOptions& t) {
  f.add("train", "steps", &t.steps, "optimizer steps", {0, kMaxSteps});
  f.add("train", "batch", &t.batch, "global batch size in sequences", {1, kMaxBatch});
  f.add("train", "lr", &t.lr, "peak learning rate", {0, kMaxFloat, true});
  f.add("train", "min-lr", &t.min_lr, "final learning rate of the cosine schedule", {0, kMaxFloat});
  f.add("train", "warmup", &t.warmup, "linear warmup updates", {0, kMaxSteps});
  f.add_choice("train", "lr-schedule", &t.lr_schedule, "constant|cosine", lr_kind_names(),
               ChoiceRefusal::in_words);
  f.add("train", "weight-decay", &t.weight_decay, "AdamW decoupled weight decay (2-D tensors)",
        {0, kMaxFloat});
  f.add("train", "grad-clip", &t.grad_clip, "clip gradients to this global L2 norm (0 = off)",
        {0, kMaxFloat});
  f.add("train", "beta1", &t.beta1, "AdamW beta1", {0, 1});
  f.add("train", "beta2", &t.beta2, "AdamW beta2", {0, 1});
  f.add("train", "eps", &t.eps, "AdamW epsilon", {0, kMaxFloat, true});
  // A TOML integer is an int64: beyond it, --print-config would write what --config cannot
  // read back.
  f.add("train", "seed", &t.seed, "seed of the initialisation and of sampling",
        {0, static_cast<long double>(INT64_MAX)});
  f.add("train", "threads", &t.threads, "compute threads per rank", {1, kMaxComputeThreads});
  f.add("train", "peak-gflops", &t.peak_gflops,
        "sgemm peak of one thread in GFLOP/s, the denominator of the mfu metric (e.g. from "
        "'meshtrain bench gemm' on a quiet machine); 0 = measure at start-up (best of short "
        "single-thread sgemms)",
        {0, kMaxPeakGflops});
  f.add("train", "eval-every", &t.eval_every,
        "validation loss every N steps and at the end (0 = never)", {0, kMaxSteps});
  f.add("train", "eval-batches", &t.eval_batches, "global batches per validation",
        {1, kMaxEvalBatches});
  f.add_choice("train", "recompute", &t.recompute,
               "activation recomputation: none (keep everything), selective (recompute the "
               "attention core's softmax probabilities in backward: no (b, heads, seq, seq) per "
               "layer per microbatch) or full (keep each block's input only and re-run the block's "
               "forward in its backward; an MoE block routes again without counting its routing "
               "twice); exact, same losses and weights",
               recompute_names(), ChoiceRefusal::in_words);
  f.add_choice("train", "precision", &t.precision,
               "fp32, or bf16: the linear layers multiply bf16 weights and inputs with fp32 "
               "accumulation (oneDNN; AVX512-BF16 or AMX), master weights, optimizer, gradients, "
               "LayerNorm, attention and loss stay fp32 (docs/precision.md)",
               precision_names(), ChoiceRefusal::in_words);
}

void define_io_flags(FlagSet& f, IoOptions& io) {
  f.add("data", "data", &io.data,
        "training token shard (llm.c format) or dataset directory (meshtrain prepare); "
        "default: the embedded fortunes corpus");
  f.add("data", "val-data", &io.val_data,
        "validation token shard or dataset directory (default: --data DIR's validation split)");
  f.add_choice("data", "data-order", &io.data_order,
               "shuffled: samples of seq+1 tokens drawn through a per-epoch shuffled index of "
               "--seed, the same in every layout (cached in ~/.cache/meshtrain/sample_index); "
               "sequential: llm.c's order, batch after batch along the data",
               data_order_names(), ChoiceRefusal::in_words);
  f.add("io", "init-from", &io.init_from,
        "initial weights: a safetensors file (nanoGPT or Llama names), or a Hugging Face Llama "
        "directory (config.json + safetensors), whose config.json sets the model's shape");
  f.add("io", "export", &io.export_path, "write final weights to this safetensors file");
  f.add("io", "export-hf", &io.export_hf,
        "write final weights as a Hugging Face Llama directory (config.json, model.safetensors, "
        "and tokenizer.model when the data has one; --arch llama; docs/huggingface.md)");
  f.add_choice("io", "export-dtype", &io.export_dtype,
               "fp32 or bf16: dtype of the --export / --export-hf weights (bf16 halves them; "
               "checkpoints stay fp32)",
               precision_names(), ChoiceRefusal::in_words);
  f.add("io", "save", &io.save, "checkpoint directory to write (resumable state)");
  f.add("io", "save-every", &io.save_every, "also save every N steps (0 = only at the end)",
        {0, kMaxSteps});
  f.add("io", "load", &io.load, "checkpoint directory to resume from");
  f.add_choice("io", "checkpoint-format", &io.checkpoint_format,
               "global: --save DIR is one checkpoint, gathered to and written by rank 0; sharded: "
               "every rank writes what it owns into DIR/step_NNNNNN in parallel, with a manifest "
               "(docs/checkpoints.md)",
               checkpoint_format_names(), ChoiceRefusal::in_words);
  f.add("io", "keep-checkpoints", &io.keep_checkpoints,
        "sharded: keep the K newest complete checkpoints under --save (0 = keep all)",
        {0, kMaxKeepCheckpoints});
  f.add_parsed<bool>(
      "io", "resume", &io.resume_auto,
      "auto: resume from the newest valid checkpoint under --save (skipping damaged ones), "
      "or start fresh when there is none",
      "auto",
      [](const std::string& text, const std::string& flag) {
        MT_REQUIRE(text.empty() || text == "auto", flag, " must be auto (got '", text, "')");
        return text == "auto";
      },
      [](const bool& resume) { return std::string(resume ? "auto" : ""); });
  f.add_bool("io", "save-sync", &io.save_sync,
             "sharded: write checkpoints on the training thread instead of in the background");
  f.add("io", "metrics", &io.metrics, "JSONL metrics file (one record per step)");
  f.add("io", "trace", &io.trace, "Chrome/Perfetto trace file (JSON)");
  f.add("io", "report-every", &io.report_every,
        "rewrite the report page beside --metrics (its .html) every N steps and at the end "
        "(0 = only at the end)",
        {0, kMaxSteps});
  f.add("io", "sample-tokens", &io.sample_tokens,
        "print a generated sample of N tokens at the end (0 = none)", {0, kMaxSampleTokens});
  f.add("io", "prompt", &io.sample_prompt, "prompt of the final sample");
  f.add_bool("io", "quiet", &io.quiet,
             "no progress or other output, only the final summary line (steps, losses, "
             "tokens/s, where the outputs went)");
  f.add_choice("io", "progress", &io.progress,
               "auto: a bar redrawn in place when stdout is a terminal and no launcher (mpirun, "
               "srun) started the run, else plain lines; bar; lines (every --log-every steps); "
               "none",
               {{"auto", ProgressMode::automatic},
                {"bar", ProgressMode::bar},
                {"lines", ProgressMode::lines},
                {"none", ProgressMode::none}});
  f.add("io", "log-every", &io.log_every,
        "with plain progress lines: one line every N steps (and at the last)", {1, kMaxSteps});
}

void define_engine_flags(FlagSet& f, EngineOptions& e) {
  f.add_choice("engine", "backend", &e.backend,
               "local: ranks are threads of this process; mpi: one rank per MPI process (mpirun)",
               backend_names(), ChoiceRefusal::in_words);
  f.add("engine", "timeout", &e.timeout_s,
        "seconds a collective may wait before the run aborts naming the missing ranks",
        {0, kMaxTimeoutS, true});
  f.add("engine", "max-restarts", &e.max_restarts,
        "local backend: after a rank failure or hang, restart the job from the newest "
        "checkpoint under --save up to N times (mpirun: scripts/mpirun_supervisor.sh)",
        {0, kMaxRestarts});
  f.add("engine", "ranks-per-process", &e.ranks_per_process,
        "with --backend mpi: ranks each MPI process runs as threads (hybrid world; tp groups "
        "stay inside a process when tp divides it)",
        {1, kMaxLocalRanks});
  f.add_choice("engine", "bind", &e.bind,
               "local backend: auto pins each rank's --threads compute threads (2 ranks or more) "
               "to cores of its own where ranks x threads fit the cores the process may use, "
               "round robin where they do not (consecutive ranks, a tp pair, on different "
               "cores); cores: always (refused when they do not fit); none: the OS places them",
               core_binding_names(), ChoiceRefusal::in_words);
}

}  // namespace

void define_train_flags(FlagSet& f, TrainOptions& o) {
  define_model_flags(f, o.model);
  define_parallel_flags(f, o.parallel);
  define_optim_flags(f, o.optim);
  define_io_flags(f, o.io);
  define_engine_flags(f, o.engine);
}

CommandRunner add_train_command(CLI::App& app, int* argc, char*** argv) {
  auto opts = std::make_shared<TrainOptions>();
  auto flags = std::make_shared<FlagSet>();
  auto print_config = std::make_shared<bool>(false);
  auto print_layout = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("train", "train a GPT (flags: docs/contracts.md section 5)");
  // Repeating a flag overrides the earlier value, as users of shell scripts expect.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  const bool is_train = *argc > 1 && std::strcmp((*argv)[1], "train") == 0;
  define_train_flags(*flags, *opts);
  const std::vector<std::string> configs =
      is_train ? find_config_args(*argc, *argv) : std::vector<std::string>{};
  // A bad config file is reported when the command runs, as a usage error.
  auto config_error = std::make_shared<std::string>(apply_config(configs, *flags));
  if (configs.size() == 1) opts->io.config = configs[0];
  cmd->add_option("--config",
                  "TOML file with [model] [parallel] [train] [data] [io] [engine] "
                  "sections; flags override it");
  cmd->add_flag("--print-config", *print_config,
                "print the resolved configuration as TOML and exit");
  cmd->add_flag("--print-layout", *print_layout,
                "print which processes run which ranks and where each group communicates "
                "(--ranks-per-process), then exit");
  flags->register_cli(*cmd);
  return [=]() {
    if (!config_error->empty()) throw UsageError(*config_error);
    flags->check_values();
    opts->vocab_given = flags->given("vocab");
    opts->seq_given = flags->given("seq");
    opts->flags_given = flags->given_names();
    for (const std::string& k : hf_shape_flags())
      if (flags->given(k)) opts->model_flags_given.push_back(k);
    MT_REQUIRE(opts->parallel.ranks == 0 || opts->parallel.auto_layout,
               "--ranks is for --auto-layout (else the layout's dp x tp x pp is the world)");
    for (const char* k : {"dp", "tp", "pp", "ep", "cp", "zero", "sequence-parallel", "schedule",
                          "virtual-stages", "microbatches", "recompute"})
      if (flags->given(k)) opts->parallel.fixed.push_back(k);
    if (*print_config) {
      std::printf("%s", flags->to_toml().c_str());
      return 0;
    }
    if (*print_layout) {
      std::printf("%s", describe_train_layout(*opts).c_str());
      return 0;
    }
    return run_training(*opts, argc, argv);
  };
}

}  // namespace mt
