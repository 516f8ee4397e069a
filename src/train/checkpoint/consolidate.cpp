#include "train/checkpoint/consolidate.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/file_checks.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/global_checkpoint.h"
#include "train/checkpoint/shard_reader.h"
#include "train/finite_gate.h"
#include "train/global_view.h"
#include "train/hf_config.h"
#include "train/hf_export.h"
#include "train/tokenizer.h"
#include "train/weights_file.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

// A checkpoint holding NaN is damaged input (exit 2, as --load says it); the writer's own
// gate (train/finite_gate.h) would refuse it too, as a failure.
void require_finite_tensor(const std::string& dir, const std::string& name,
                           const std::vector<float>& w) {
  for (size_t i = 0; i < w.size(); ++i)
    MT_REQUIRE(std::isfinite(w[i]), dir, ": tensor ", name, " element ", i, " is ", w[i],
               " (not finite): the checkpoint holds a diverged state; nothing was written");
}

// The selection biases of c's routers, each filled by `read` (E floats, the tensor's name)
// where the checkpoint holds it; zeros otherwise (a checkpoint may hold none).
template <typename Read>
void read_router_biases(CheckpointWeights& c, const std::string& dir, Read&& read) {
  for (const std::string& name : router_bias_names(c.table)) {
    NamedTensor b{name, std::vector<float>(size_t(c.model.experts), 0.0f)};
    read(b.data, name);
    require_finite_tensor(dir, name, b.data);
    c.router_biases.push_back(std::move(b));
  }
}

CheckpointWeights read_sharded(const std::string& dir) {
  const ShardedVerification v = verify_sharded_checkpoint(dir);
  const Manifest& m = v.manifest;
  ShardReader reader(dir, m);
  CheckpointWeights c{m.model, whole_model_table(m.model), {}, m.metadata, {}, {}};
  for (const ParamInfo& p : c.table.entries()) {
    const ManifestTensor* t = reader.tensor(p.name);
    MT_REQUIRE(t && t->shape == p.global_shape, dir, "/", kManifestFile, ": tensor ", p.name,
               " is missing or not of its model's shape");
    c.weights.emplace_back(size_t(p.global_numel()));
    reader.read(p.name, 0, p.global_numel(), c.weights.back().data());
    require_finite_tensor(dir, p.name, c.weights.back());
  }
  read_router_biases(c, dir, [&](std::vector<float>& b, const std::string& name) {
    const ManifestTensor* t = reader.tensor(name);
    if (!t) return;
    MT_REQUIRE(t->shape == std::vector<int64_t>{int64_t(b.size())}, dir, "/", kManifestFile,
               ": tensor ", name, " is not of its model's shape");
    reader.read(name, 0, int64_t(b.size()), b.data());
  });
  c.report = {m.step, int64_t(c.table.entries().size()), v.bytes_verified};
  return c;
}

// A global checkpoint (global_checkpoint.h): its model.safetensors carries the model config and
// the tokenizer record as metadata.
CheckpointWeights read_global(const std::string& dir, const std::string& flag) {
  const CheckpointVerification v = verify_checkpoint(dir, flag);
  const std::string path = dir + "/model.safetensors";
  const ModelConfig model = model_config_from_file(path, ModelConfig{});
  const SafetensorsFile f(path);
  CheckpointWeights c{model, whole_model_table(model), {}, f.metadata(), {}, {}};
  for (const ParamInfo& p : c.table.entries()) {
    f.expect_shape(p.name, p.global_shape);
    c.weights.push_back(f.read(p.name));
    require_finite_tensor(dir, p.name, c.weights.back());
  }
  read_router_biases(c, dir, [&](std::vector<float>& b, const std::string& name) {
    read_router_bias(dir, name, b);
  });
  c.report = {read_train_state(dir, flag).step, int64_t(c.table.entries().size()),
              v.bytes_verified};
  return c;
}

// Writing `out` (flag) must not touch the checkpoint `dir`: not inside it, not it, not
// around it (a directory output replaces what it holds).
void require_apart(const std::string& flag, const std::string& out, const std::string& dir) {
  std::error_code ec;
  const std::string o = fs::weakly_canonical(fs::absolute(out), ec).string();
  const std::string d = fs::weakly_canonical(fs::absolute(dir), ec).string();
  MT_REQUIRE(o != d && !o.starts_with(d + "/") && !d.starts_with(o + "/"), flag, " ", out,
             " overlaps the checkpoint ", dir, " it reads; write it elsewhere");
}

// A value the export's dtype cannot hold is the checkpoint's, known before anything is
// written: bad input (exit 2), as a NaN in it is. The writer's own gate would refuse it too,
// but as a failure (exit 1).
void require_storable(const std::string& out, const CheckpointWeights& c, bool as_bf16) {
  if (!as_bf16) return;
  std::vector<GateTensor> tensors;
  for (size_t i = 0; i < c.weights.size(); ++i)
    tensors.push_back({c.table.entries()[i].name, c.weights[i].data(), c.weights[i].size()});
  try {
    require_finite_for_disk(out, tensors, DiskDtype::bf16);
  } catch (const RuntimeError& e) {
    throw UsageError(
        str(e.what(), " (a value of the checkpoint; export it with --export-dtype ", "fp32)"));
  }
}

}  // namespace

CheckpointWeights read_checkpoint_weights(const std::string& dir, const std::string& flag) {
  if (loads_sharded(dir)) return read_sharded(dir);
  require_input_dir(flag, dir);
  return read_global(dir, flag);
}

ConsolidateReport export_sharded_checkpoint(const std::string& dir, const std::string& out,
                                            bool as_bf16) {
  require_output_file("--to", out);
  // Writing into the checkpoint would replace one of its files (or add a stranger to it).
  std::error_code ec;
  const fs::path out_dir = fs::weakly_canonical(fs::absolute(parent_directory(out)), ec);
  const fs::path ckpt = fs::weakly_canonical(fs::absolute(dir), ec);
  MT_REQUIRE(out_dir != ckpt, "--to ", out, " is inside the checkpoint ", dir,
             " it reads; write it elsewhere");
  const CheckpointWeights c = read_checkpoint_weights(dir, "--from");
  require_storable(out, c, as_bf16);
  export_weights(out, c.table, c.model, c.weights, as_bf16, c.metadata,
                 exported_router_biases(c.model, c.router_biases));
  return c.report;
}

ConsolidateReport export_checkpoint_to_hf(const std::string& dir, const std::string& out,
                                          bool as_bf16) {
  require_hf_output_dir("--to-hf", out);
  require_apart("--to-hf", out, dir);
  const bool sharded = loads_sharded(dir);
  const CheckpointWeights c = read_checkpoint_weights(dir, "--from");
  require_hf_exportable(c.model, "--to-hf");
  require_storable(out, c, as_bf16);
  const std::string where = sharded ? dir + "/" + kManifestFile : dir + "/model.safetensors";
  export_hf_directory(out, c.table, c.model, c.weights, as_bf16,
                      metadata_tokenizer(c.metadata, where),
                      exported_router_biases(c.model, c.router_biases));
  return c.report;
}

}  // namespace mt
