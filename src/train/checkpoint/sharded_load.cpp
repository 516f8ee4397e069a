#include "train/checkpoint/sharded_load.h"

#include <cmath>

#include "core/error.h"
#include "model/moe_layer.h"
#include "train/checkpoint/manifest.h"
#include "train/checkpoint/shard_reader.h"
#include "train/global_view.h"

namespace mt {

void load_sharded_session(Session& s) {
  const std::string& dir = s.opts.io.load;
  const std::string where = "--load " + dir;
  // Every block was verified before the ranks started; the reader rechecks the blocks it
  // reads (a file could change in between).
  const Manifest m = read_manifest(dir);
  require_same_model(m, s.opts.model, where);
  MT_REQUIRE(m.step <= s.opts.optim.steps, where, " is at step ", m.step, ", beyond --steps ",
             s.opts.optim.steps);
  ShardReader reader(dir, m);
  const ParamTable& table = s.model.table();
  auto require_tensor = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const ManifestTensor* t = reader.tensor(name);
    MT_REQUIRE(t, where, "/", kManifestFile, ": the checkpoint has no tensor ", name,
               " (a checkpoint of another model)");
    MT_REQUIRE(t->shape == shape, where, "/", kManifestFile, ": tensor ", name, " is ",
               shape_str(t->shape), ", this model's is ", shape_str(shape));
  };
  for (const ParamInfo& p : table.entries()) {
    require_tensor(p.name, p.global_shape);
    for (const char* suffix : kMomentSuffixes) require_tensor(p.name + suffix, p.global_shape);
  }
  // Local elements [lo, hi) of p from the checkpoint's tensor `name` into dst (local lo).
  auto read_range = [&](const ParamInfo& p, const std::string& name, size_t lo, size_t hi,
                        float* dst) {
    map_local_range(p, lo, hi, [&](size_t l, int64_t g, int64_t n) {
      float* d = dst + (l - lo);
      reader.read(name, g, n, d);
      for (int64_t i = 0; i < n; ++i)
        MT_REQUIRE(std::isfinite(d[i]), where, ": tensor ", name, " element ", g + i, " is ", d[i],
                   " (not finite): the checkpoint holds a diverged state");
    });
  };
  if (s.opts.parallel.zero < 3) {
    std::vector<float> local(table.total(), 0.f);  // this rank's replica, which it holds anyway
    for (const ParamInfo& p : table.entries())
      read_range(p, p.name, 0, p.numel, local.data() + p.offset);
    s.dp.load_params(local.data());
  } else {
    float* shard = s.dp.param_storage();
    for (const UpdatePiece& u : s.dp.update_pieces()) {
      const ParamInfo& p = table.at_offset(u.table_off);
      const size_t lo = u.table_off - p.offset;
      read_range(p, p.name, lo, lo + u.n, shard + u.param_off);
    }
    s.dp.release_params();
  }
  float* moments[] = {s.opt.exp_avg().data(), s.opt.exp_avg_sq().data()};
  for (int k = 0; k < 2; ++k) {
    size_t dense = 0;
    for (const UpdatePiece& u : s.dp.update_pieces()) {
      const ParamInfo& p = table.at_offset(u.table_off);
      const size_t lo = u.table_off - p.offset;
      read_range(p, p.name + kMomentSuffixes[k], lo, lo + u.n, moments[k] + dense);
      dense += u.n;
    }
  }
  const std::vector<std::string> bias_names = router_bias_names(table);
  MT_CHECK(bias_names.size() == s.moe.size(), "routers vs MoE layers");
  for (size_t i = 0; i < bias_names.size(); ++i) {
    std::vector<float>& bias = s.moe[i]->router_bias();
    require_tensor(bias_names[i], {int64_t(bias.size())});
    reader.read(bias_names[i], 0, int64_t(bias.size()), bias.data());
  }
  s.start_step = m.step;
  s.train.set_position(m.data_position);
}

}  // namespace mt
