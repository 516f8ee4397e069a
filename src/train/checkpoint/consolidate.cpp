#include "train/checkpoint/consolidate.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/file_checks.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/shard_reader.h"
#include "train/global_view.h"
#include "train/weights_file.h"

namespace fs = std::filesystem;

namespace mt {

ConsolidateReport export_sharded_checkpoint(const std::string& dir, const std::string& out) {
  require_output_file("--to", out);
  // Writing into the checkpoint would replace one of its files (or add a stranger to it).
  std::error_code ec;
  const fs::path out_dir = fs::weakly_canonical(fs::absolute(parent_directory(out)), ec);
  const fs::path ckpt = fs::weakly_canonical(fs::absolute(dir), ec);
  MT_REQUIRE(out_dir != ckpt, "--to ", out, " is inside the checkpoint ", dir,
             " it reads; write it elsewhere");
  const ShardedVerification v = verify_sharded_checkpoint(dir);
  const Manifest& m = v.manifest;
  ShardReader reader(dir, m);
  const ParamTable table = whole_model_table(m.model);
  GlobalTensors weights;
  for (const ParamInfo& p : table.entries()) {
    const ManifestTensor* t = reader.tensor(p.name);
    MT_REQUIRE(t && t->shape == p.global_shape, dir, "/", kManifestFile, ": tensor ", p.name,
               " is missing or not of its model's shape");
    weights.emplace_back(size_t(p.global_numel()));
    reader.read(p.name, 0, p.global_numel(), weights.back().data());
    // A checkpoint holding NaN is damaged input (exit 2, as --load says it); the writer's
    // own gate (train/finite_gate.h) would refuse it too, as a failure.
    const std::vector<float>& w = weights.back();
    for (size_t i = 0; i < w.size(); ++i)
      MT_REQUIRE(std::isfinite(w[i]), dir, ": tensor ", p.name, " element ", i, " is ", w[i],
                 " (not finite): the checkpoint holds a diverged state; nothing was written");
  }
  export_weights(out, table, m.model, weights, /*as_bf16=*/false, m.metadata);
  return {m.step, int64_t(table.entries().size()), v.bytes_verified};
}

}  // namespace mt
