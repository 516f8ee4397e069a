// The ZeRO-2 gradient buffers are sized by the model's actual buckets: a model smaller
// than one bucket holds its shard plus one buffer per actual bucket (about 1 + 1/dp of the
// ZeRO-1 gradients), not two block buffers; a model of several buckets keeps two, one
// filling while the other is in flight.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "core/threads.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/parallel_context.h"

namespace mt {
namespace {

struct Grads {
  size_t bytes = 0, buffer_bytes = 0;
  size_t shard = 0, edge_bucket = 0, block_bucket = 0;  // floats
  int block_buckets = 0;
};

Grads grad_memory(int zero, double bucket_mb) {
  ModelConfig cfg;
  cfg.layers = 3, cfg.dim = 32, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19;
  Grads out;
  run_local(4, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, 4, 1, 1});
    GPT model(cfg, GPT::whole_model(cfg), TensorParallelShard{}, 2);
    model.init(3);
    DataParallel dp(model, {.dp = ctx.dp, .zero = zero, .bucket_mb = bucket_mb});
    if (w.rank() != 0) return;
    const FlatLayout& l = dp.layout();
    out.bytes = dp.memory().grads_bytes;
    out.buffer_bytes = dp.memory().grad_buffer_bytes;
    out.shard = l.shard_size();
    for (const FlatBucket& b : l.buckets()) {
      if (l.is_edge(b.units[0])) {
        out.edge_bucket = std::max(out.edge_bucket, b.size());
      } else {
        out.block_bucket = std::max(out.block_bucket, b.size());
        ++out.block_buckets;
      }
    }
  });
  return out;
}

TEST(DataParallelMemory, Zero2BuffersForAModelSmallerThanABucket) {
  const Grads z1 = grad_memory(1, 25), z2 = grad_memory(2, 25);
  ASSERT_EQ(z2.block_buckets, 1);  // every block in one bucket, the edge unit in another
  // The shard plus the two actual buckets, which together are the flat gradients.
  EXPECT_EQ(z2.buffer_bytes, (z2.edge_bucket + z2.block_bucket) * sizeof(float));
  EXPECT_EQ(z2.bytes, (z2.shard + z2.edge_bucket + z2.block_bucket) * sizeof(float));
  EXPECT_EQ(z2.bytes, z1.bytes + z1.bytes / 4);  // ZeRO-1 holds the flat gradients
}

TEST(DataParallelMemory, Zero2KeepsTwoBlockBuffersForSeveralBuckets) {
  const Grads z2 = grad_memory(2, 0.001);  // one block per bucket
  ASSERT_EQ(z2.block_buckets, 3);
  EXPECT_EQ(z2.buffer_bytes, (z2.edge_bucket + 2 * z2.block_bucket) * sizeof(float));
  EXPECT_EQ(z2.bytes, z2.shard * sizeof(float) + z2.buffer_bytes);
}

}  // namespace
}  // namespace mt
