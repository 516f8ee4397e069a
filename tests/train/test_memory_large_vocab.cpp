// Memory at Llama 3's vocabulary (V = 128,256): the up-front estimate (the public
// estimate_rank_memory) against the memory record a real step writes, layout by layout,
// and the logits held once. The head keeps one (b*T, V/tp) fp32 buffer per microbatch in
// flight on the last stage: the logits, overwritten in place by their gradient
// (kernels/crossentropy.h), never a second copy. With a tiny model the logits are nearly
// the whole slot, so a second (N, V/tp) buffer would double the figure this test pins.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/timer.h"
#include "data/token_shard.h"
#include "kernels/matmul_bf16.h"
#include "tensor_parallel/vocab_parallel.h"
#include "test_util/temp_dir.h"
#include "train/memory_estimate.h"
#include "train/trainer.h"

namespace mt {
namespace {

using test_util::TempDir;

constexpr int kVocab = 128256;

// 2 layers of width 16 at seq 16, batch 8: one microbatch's logits are (128, 128256) fp32,
// 65.7 MB on one worker. The data is a version-2 shard over the whole vocabulary.
TrainOptions large_vocab_run(const TempDir& dir) {
  TrainOptions o;
  o.model.layers = 2;
  o.model.dim = 16;
  o.model.heads = 4;
  o.model.seq = 16;
  o.model.vocab = kVocab;
  o.optim.batch = 8;
  o.optim.steps = 1;
  o.io.quiet = true;
  o.io.data = dir / "train.bin";
  o.io.metrics = dir / "metrics.jsonl";
  std::vector<int> tokens(8 * 17 * 2);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int(i * 104729 % kVocab);
  write_token_shard(o.io.data, tokens);
  return o;
}

struct Record {
  int64_t recorded = 0, activations = 0;
};

// One step in this process; the largest per-rank figures of the memory records.
Record measure(const TrainOptions& o) {
  RunInfo info;
  info.peak = MfuPeak::given(1);
  info.t0 = now_seconds();
  run_local(o.parallel.world(), WorldOptions{}, [&](CommWorld& w) { train_rank(o, w, info); });
  std::ifstream in(o.io.metrics);
  Record m;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") != "memory") continue;
    const int64_t a = j["activations_peak_bytes"];
    const int64_t sum =
        int64_t(j["params_bytes"]) + int64_t(j["grads_bytes"]) + int64_t(j["optimizer_bytes"]) + a;
    m.recorded = std::max(m.recorded, sum);
    m.activations = std::max(m.activations, a);
  }
  return m;
}

struct Layout {
  const char* name;
  void (*apply)(TrainOptions&);
};

TEST(MemoryLargeVocab, EstimateMatchesTheRecordAndLogitsAreHeldOnce) {
  std::vector<Layout> layouts = {
      {"one worker", [](TrainOptions&) {}},
      {"tp 2", [](TrainOptions& o) { o.parallel.tp = 2; }},
      {"tp 4", [](TrainOptions& o) { o.parallel.tp = 4; }},
      {"tp 4 sp",
       [](TrainOptions& o) {
         o.parallel.tp = 4;
         o.parallel.sequence_parallel = true;
       }},
      {"tp 2 m 2",
       [](TrainOptions& o) {
         o.parallel.tp = 2;
         o.parallel.microbatches = 2;
       }},
      {"pp 2 m 4 1f1b",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.microbatches = 4;
       }},
      {"llama tp 2",
       [](TrainOptions& o) {
         o.model.arch = Arch::llama;
         o.parallel.tp = 2;
       }},
      {"llama tp 4 sp",
       [](TrainOptions& o) {
         o.model.arch = Arch::llama;
         o.parallel.tp = 4;
         o.parallel.sequence_parallel = true;
       }},
      {"tp 2 selective",
       [](TrainOptions& o) {
         o.parallel.tp = 2;
         o.optim.recompute = Recompute::selective;
       }},
  };
  if (bf16_matmul_supported())
    layouts.push_back({"bf16 tp 2", [](TrainOptions& o) {
                         o.optim.precision = Precision::bf16;
                         o.parallel.tp = 2;
                       }});
  std::printf("%-16s %12s %12s %12s %12s  (bytes)\n", "layout", "act measured", "act estimate",
              "logits", "recorded");
  for (const Layout& l : layouts) {
    TempDir dir;
    TrainOptions o = large_vocab_run(dir);
    l.apply(o);
    const MemoryEstimate e = estimate_rank_memory(o);
    const Record m = measure(o);
    // The last stage holds the head; 1f1b keeps one microbatch in flight there.
    const int64_t rows = int64_t(o.optim.batch) / o.parallel.microbatches * o.model.seq;
    const int64_t logits = rows * (tp::padded_vocab(kVocab, o.parallel.tp) / o.parallel.tp) * 4;
    std::printf("%-16s %12lld %12lld %12lld %12lld\n", l.name, (long long)m.activations,
                (long long)e.activations_bytes, (long long)logits, (long long)m.recorded);
    EXPECT_EQ(e.activations_bytes, m.activations) << l.name;
    EXPECT_LE(std::abs(double(e.recorded() - m.recorded)), 0.05 * double(m.recorded)) << l.name;
    // Held once: the slot is the logits plus the rest of the (tiny) model's activations.
    EXPECT_GE(m.activations, logits) << l.name;
    EXPECT_LT(m.activations, logits + logits / 2) << l.name;
  }
}

}  // namespace
}  // namespace mt
