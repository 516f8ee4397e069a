// `meshtrain checkpoint verify DIR` and `meshtrain export --from DIR --to FILE`: sharded
// checkpoints offline (train/checkpoint/). Verify also takes a global checkpoint.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "train/checkpoint/global_checkpoint.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/consolidate.h"
#include "train/checkpoint/checkpoint_paths.h"

namespace mt {

namespace {

int verify(const std::string& dir) {
  if (loads_sharded(dir)) {
    const ShardedVerification v = verify_sharded_checkpoint(dir);
    std::printf(
        "%s: ok: sharded checkpoint of step %d, %zu tensors in %zu files, %llu bytes "
        "verified (CRC-32C per MiB)\n",
        dir.c_str(), v.manifest.step, v.manifest.tensors.size(), v.manifest.files.size(),
        static_cast<unsigned long long>(v.bytes_verified));
    return 0;
  }
  const CheckpointVerification v = verify_checkpoint(dir);
  MT_REQUIRE(v.verified, dir,
             ": a global checkpoint without checksums (written before they were "
             "recorded): its files cannot be verified");
  std::printf("%s: ok: global checkpoint of step %d, %llu bytes verified\n", dir.c_str(),
              read_train_state(dir).step, static_cast<unsigned long long>(v.bytes_verified));
  return 0;
}

}  // namespace

CommandRunner add_checkpoint_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("checkpoint", "inspect checkpoints without loading them");
  CLI::App* v = cmd->add_subcommand(
      "verify", "check a checkpoint directory: manifest, every shard present, every checksum");
  v->add_option("DIR", *dir, "checkpoint directory (DIR/step_NNNNNN, or a global one)")->required();
  cmd->require_subcommand(1);
  return [dir]() { return verify(*dir); };
}

CommandRunner add_export_command(CLI::App& app) {
  auto from = std::make_shared<std::string>();
  auto to = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "export",
      "write the weights of a sharded checkpoint as one safetensors file (nanoGPT names)");
  cmd->add_option("--from", *from, "sharded checkpoint directory (DIR/step_NNNNNN)")->required();
  cmd->add_option("--to", *to, "output .safetensors file")->required();
  return [from, to]() {
    const ConsolidateReport r = export_sharded_checkpoint(*from, *to);
    std::printf("wrote %s: %lld tensors of step %d\n", to->c_str(),
                static_cast<long long>(r.tensors), r.step);
    return 0;
  };
}

}  // namespace mt
