// `meshtrain checkpoint verify DIR` and `meshtrain export --from DIR --to FILE | --to-hf DIR`:
// checkpoints offline (train/checkpoint/). DIR is a step folder, a run folder (its newest
// complete step) or a global checkpoint, as for every command (checkpoint_location.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "model/precision.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_location.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/consolidate.h"
#include "train/checkpoint/global_checkpoint.h"

namespace mt {

namespace {

int verify(const std::string& given) {
  const std::string dir = resolve_checkpoint_dir("checkpoint verify", given);
  if (loads_sharded(dir)) {
    const ShardedVerification v = verify_sharded_checkpoint(dir);
    std::printf(
        "%s: ok: sharded checkpoint of step %d, %zu tensors in %zu files, %llu bytes "
        "verified (CRC-32C per MiB)\n",
        dir.c_str(), v.manifest.step, v.manifest.tensors.size(), v.manifest.files.size(),
        static_cast<unsigned long long>(v.bytes_verified));
    return 0;
  }
  const CheckpointVerification v = verify_checkpoint(dir, "checkpoint verify");
  MT_REQUIRE(v.verified, dir,
             ": a global checkpoint without checksums (written before they were "
             "recorded): its files cannot be verified");
  // What the files cannot prove (a llama checkpoint written before the tie was recorded)
  // goes on the same line: everything checkable passed, so the exit stays 0, and a script
  // reading the one line sees the caveat beside the "ok".
  std::string unchecked;
  for (const std::string& what : v.unchecked) unchecked += "; not checked: " + what;
  std::printf("%s: ok: global checkpoint of step %d, %llu bytes verified%s\n", dir.c_str(),
              read_train_state(dir, "checkpoint verify").step,
              static_cast<unsigned long long>(v.bytes_verified), unchecked.c_str());
  return 0;
}

}  // namespace

CommandRunner add_checkpoint_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("checkpoint", "inspect checkpoints without loading them");
  CLI::App* v = cmd->add_subcommand(
      "verify", "check a checkpoint directory: manifest, every shard present, every checksum");
  v->add_option("DIR", *dir,
                "checkpoint: a step folder DIR/step_NNNNNN, a run folder (its newest complete "
                "step) or a global checkpoint")
      ->required();
  cmd->require_subcommand(1);
  return [dir]() { return verify(*dir); };
}

namespace {

struct ExportArgs {
  std::string from, to, to_hf;
  Precision dtype = Precision::fp32;
};

int run_export(const ExportArgs& a) {
  MT_REQUIRE(a.to.empty() != a.to_hf.empty(),
             "give exactly one of --to FILE.safetensors or --to-hf DIR");
  const bool bf16 = a.dtype == Precision::bf16;
  const std::string from = resolve_checkpoint_dir("--from", a.from);
  if (!a.to_hf.empty()) {
    const ConsolidateReport r = export_checkpoint_to_hf(from, a.to_hf, bf16);
    std::printf("wrote %s: a Hugging Face Llama directory of %lld tensors of step %d\n",
                a.to_hf.c_str(), static_cast<long long>(r.tensors), r.step);
    return 0;
  }
  const ConsolidateReport r = export_sharded_checkpoint(from, a.to, bf16);
  std::printf("wrote %s: %lld tensors of step %d\n", a.to.c_str(),
              static_cast<long long>(r.tensors), r.step);
  return 0;
}

}  // namespace

CommandRunner add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "write the weights of a checkpoint (sharded or global) as one safetensors file (nanoGPT "
      "names) or as a Hugging Face Llama directory (--to-hf)");
  cmd->add_option("--from", a->from,
                  "checkpoint: a step folder DIR/step_NNNNNN, a run folder (its newest complete "
                  "step) or a global checkpoint")
      ->required();
  cmd->add_option("--to", a->to, "output .safetensors file");
  cmd->add_option("--to-hf", a->to_hf,
                  "output Hugging Face Llama directory (config.json, model.safetensors, "
                  "tokenizer.model when the checkpoint records one; docs/huggingface.md)");
  // Parsed once, as train's --export-dtype is (FlagSet::add_choice), in the same words.
  cmd->add_option_function<std::string>(
         "--export-dtype",
         [a](const std::string& text) {
           MT_REQUIRE(parse_precision(text, &a->dtype),
                      "--export-dtype must be fp32 or bf16 (got '", text, "')");
         },
         "fp32 or bf16: dtype of the written weights")
      ->default_str("fp32");
  return [a]() { return run_export(*a); };
}

}  // namespace mt
