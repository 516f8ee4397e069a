// --precision bf16 in every layout against one worker in bf16, and recomputation in bf16.
//
// A layout changes only the order of fp32 sums (the dp gradient reduction, the tp partial
// products, the pipeline's tied-embedding sum), i.e. each fp32 value by an ulp or so; in
// bf16 such a difference occasionally flips a value across a bf16 rounding boundary, which
// moves it by a bf16 ulp (2^-8 relative) instead of an fp32 one (2^-23). So the layouts
// cannot be bitwise equal in bf16, and the tolerances are set by what one rounding flip
// per so many elements does:
//   - loss, every step: 1e-5 relative. A mean over B*T tokens; a few flipped GEMM inputs
//     move it by ~1e-6 (measured at most 9.5e-7 with an fp32 attention core). With the
//     core in bf16 too, q, k, v, the probabilities and their gradients are rounded as well,
//     so there are more values to flip: measured at most 4.5e-6 (tp 2), against 2.8e-5
//     between one worker's fp32 and bf16 runs.
//   - weights after kSteps AdamW updates: 1e-2 relative (L2 per tensor). AdamW scales each
//     update to ~lr whatever the gradient's size, so an element whose gradient is mostly
//     rounding noise can take a different lr-sized step; lr 1e-3 on weights of ~0.02 is at
//     most a few 1e-2 on such elements, and they are a small share of a tensor's norm.
// Both are checked to discriminate: one worker in fp32 differs from one worker in bf16 by
// more than the weight tolerance (and the loss one), so a layout that silently ran fp32,
// or skipped the bf16 rounding somewhere, would fail.
//
// Recomputation in bf16 runs the same kernels on the same bf16 inputs: bitwise, as in fp32.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/bf16.h"
#include "kernels/matmul_bf16.h"
#include "test_util/temp_dir.h"
#include "train/safetensors.h"
#include "train/session.h"
#include "train/session_io.h"
#include "train/session_tensors.h"
#include "train/step.h"
#include "train/validate_options.h"

namespace mt {
namespace {

constexpr int kSteps = 3;
constexpr double kLossRtol = 1e-5, kWeightRtol = 1e-2;

struct TrainRun {
  std::vector<double> losses, norms;
  test_util::TensorsByName params;  // the exported model, by name
};

// kSteps steps; rank 0's losses and norms, and the whole model as --export writes it (the
// global view, so tensor-parallel shards are compared whole).
// export_bytes: the size of the --export file, when asked.
TrainRun train(TrainOptions o, uintmax_t* export_bytes = nullptr) {
  test_util::TempDir out_dir;
  o.io.export_path = out_dir / "final.safetensors";
  validate_train_options(o);
  TrainRun run;
  run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) {
    std::unique_ptr<Session> s = build_session(o, w, RunInfo{});
    Trace trace(false, w.rank(), 0);
    for (int step = 1; step <= kSteps; ++step) {
      const StepRecord r = train_step(*s, step, trace);
      if (w.rank() == 0) run.losses.push_back(r.loss), run.norms.push_back(r.grad_norm);
    }
    write_final_outputs(*s, [](const std::string&) {});
  });
  SafetensorsFile f(o.io.export_path);
  for (const std::string& name : f.names()) {
    EXPECT_EQ(f.tensor(name).dtype, o.io.export_dtype == Precision::bf16 ? "BF16" : "F32") << name;
    run.params[name] = f.read(name);
  }
  if (export_bytes) *export_bytes = std::filesystem::file_size(o.io.export_path);
  return run;
}

double max_rel(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(std::fabs(b[i]), 1e-30));
  return worst;
}

// Largest relative L2 difference over the tensors; the count compared.
double weight_rel(const TrainRun& got, const TrainRun& ref, int* compared) {
  double worst = 0;
  *compared = 0;
  for (const auto& [name, w] : ref.params) {
    auto it = got.params.find(name);
    MT_CHECK(it != got.params.end() && it->second.size() == w.size(), name);
    double d = 0, n = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      d += (double(it->second[i]) - w[i]) * (double(it->second[i]) - w[i]);
      n += double(w[i]) * w[i];
    }
    // Key biases: their gradient is 0 in exact math (softmax ignores a per-row constant),
    // pure rounding noise that AdamW amplifies (tests/reference/test_vs_torch.py). Skipped.
    if (name.find("c_attn.bias") != std::string::npos) continue;
    if (n > 0) worst = std::max(worst, std::sqrt(d / n));
    ++*compared;
  }
  return worst;
}

class Bf16Layouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test_util::TempDir;
    test_util::write_random_shard(*dir_ / "train.bin", 8192, 37, 7);
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override {
    if (!bf16_matmul_supported())
      GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU (needs AVX-512)";
  }

  static TrainOptions base() {
    TrainOptions o = test_util::tiny_session_options(*dir_ / "train.bin", kSteps);
    o.optim.precision = Precision::bf16;
    o.parallel.bucket_mb = 0.001;
    return o;
  }

  // Every layout's run against one worker's (same model options).
  static void check_layouts(const TrainOptions& one,
                            const std::vector<std::pair<std::string, TrainOptions>>& layouts) {
    const TrainRun ref = train(one);
    for (const auto& [name, o] : layouts) {
      SCOPED_TRACE(name);
      const TrainRun got = train(o);
      int compared = 0;
      const double loss = max_rel(got.losses, ref.losses), w = weight_rel(got, ref, &compared);
      std::printf("%-28s loss %.2e  weights %.2e (%d tensors)\n", name.c_str(), loss, w, compared);
      EXPECT_LE(loss, kLossRtol);
      EXPECT_LE(w, kWeightRtol);
      EXPECT_GT(compared, 0);
    }
  }
  static test_util::TempDir* dir_;
};
test_util::TempDir* Bf16Layouts::dir_ = nullptr;

TEST_F(Bf16Layouts, ToleranceSeesThePrecision) {
  TrainOptions bf16 = base(), fp32 = base();
  fp32.optim.precision = Precision::fp32;
  const TrainRun a = train(bf16), b = train(fp32);
  int compared = 0;
  const double loss = max_rel(a.losses, b.losses), w = weight_rel(a, b, &compared);
  std::printf("bf16 vs fp32, one worker: loss %.2e  weights %.2e\n", loss, w);
  EXPECT_GT(loss, kLossRtol);
  EXPECT_GT(w, kWeightRtol);
}

TEST_F(Bf16Layouts, DataAndTensorParallelMatchOneWorker) {
  std::vector<std::pair<std::string, TrainOptions>> layouts;
  for (int z = 0; z <= 3; ++z) {
    TrainOptions o = base();
    o.parallel.dp = 2, o.parallel.zero = z;
    layouts.push_back({"dp 2 zero " + std::to_string(z), o});
  }
  for (bool sp : {false, true}) {
    TrainOptions o = base();
    o.parallel.tp = 2, o.parallel.sequence_parallel = sp;
    layouts.push_back({sp ? "tp 2 + sp" : "tp 2", o});
  }
  check_layouts(base(), layouts);
}

TEST_F(Bf16Layouts, PipelinesMatchOneWorker) {
  std::vector<std::pair<std::string, TrainOptions>> layouts;
  TrainOptions o = base();
  o.parallel.pp = 2, o.parallel.microbatches = 4;
  layouts.push_back({"pp 2 1f1b", o});
  o.parallel.schedule = ScheduleKind::zb_h1, o.parallel.dp = 2, o.parallel.zero = 3,
  o.parallel.microbatches = 2;
  layouts.push_back({"pp 2 zb-h1 dp 2 zero 3", o});
  o = base();
  o.parallel.pp = 2, o.parallel.schedule = ScheduleKind::interleaved, o.parallel.virtual_stages = 2;
  o.parallel.microbatches = 4, o.parallel.tp = 2, o.parallel.sequence_parallel = true;
  layouts.push_back({"pp 2 interleaved tp 2 sp", o});
  TrainOptions one = base();
  one.parallel.microbatches = 4;  // the same microbatch split as the pipelines'
  check_layouts(one, {layouts[0], layouts[2]});
  TrainOptions one2 = base();
  check_layouts(one2, {layouts[1]});
}

TEST_F(Bf16Layouts, ExpertParallelMatchesOneWorker) {
  // The experts' GEMMs are bf16 too (moe_layer.h); the router stays fp32.
  // Capacity and the aux loss are per (dp rank, microbatch) group: one worker runs the same
  // groups with dp x microbatches microbatches.
  TrainOptions one = base();
  one.model.experts = 4;
  TrainOptions ep = one;
  ep.parallel.dp = 2, ep.parallel.ep = 2;
  one.parallel.microbatches = 4;
  TrainOptions ep_z = ep;
  ep_z.parallel.zero = 1;
  check_layouts(one, {{"experts 4 ep 2", ep}, {"experts 4 ep 2 zero 1", ep_z}});
}

TEST_F(Bf16Layouts, RecomputationIsExactInBf16) {
  for (int layout = 0; layout < 4; ++layout) {
    TrainOptions o = base();
    if (layout == 1) o.parallel.tp = 2, o.parallel.sequence_parallel = true;
    if (layout == 2)
      o.parallel.pp = 2, o.parallel.schedule = ScheduleKind::zb_h1, o.parallel.microbatches = 4;
    // bf16 experts; full recomputation is refused with experts (model_chunk.cpp).
    if (layout == 3) o.model.experts = 4, o.parallel.ep = 2, o.parallel.dp = 2;
    SCOPED_TRACE("layout " + std::to_string(layout));
    const TrainRun ref = train(o);
    for (const Recompute mode : {Recompute::selective, Recompute::full}) {
      if (layout == 3 && mode == Recompute::full) continue;
      o.optim.recompute = mode;
      const TrainRun got = train(o);
      EXPECT_EQ(got.losses, ref.losses) << recompute_name(mode);
      EXPECT_EQ(got.norms, ref.norms) << recompute_name(mode);
      for (const auto& [name, w] : ref.params)
        EXPECT_TRUE(got.params.at(name) == w) << name << " " << recompute_name(mode);
    }
  }
}

TEST_F(Bf16Layouts, ExportDtypeBf16IsTheFp32ExportRounded) {
  // The same bf16 run twice (bitwise the same weights); the second exports BF16. The master
  // weights, and so --save checkpoints, stay fp32: only the export file is rounded.
  TrainOptions o = base();
  uintmax_t f32_bytes = 0, bf16_bytes = 0;
  const TrainRun f32 = train(o, &f32_bytes);
  o.io.export_dtype = Precision::bf16;
  const TrainRun half = train(o, &bf16_bytes);
  ASSERT_EQ(half.params.size(), f32.params.size());
  for (const auto& [name, w] : f32.params) {
    std::vector<float> r = w;
    round_to_bf16(r.data(), r.size());
    EXPECT_TRUE(half.params.at(name) == r) << name;
  }
  // Half the tensor bytes; the header is the same size up to the dtype strings.
  EXPECT_LT(bf16_bytes, f32_bytes * 6 / 10);
  EXPECT_GT(bf16_bytes, f32_bytes * 4 / 10);
}

}  // namespace
}  // namespace mt
