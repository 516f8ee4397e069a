// The ZeRO-2 gradient buffers are sized by the model's actual buckets: a chunk of one block
// bucket (a single block: FlatLayout::kBlockBuckets splits more blocks even when they fit
// in --bucket-mb) holds its shard plus one buffer per actual bucket (about 1 + 1/dp of the
// ZeRO-1 gradients), not two block buffers; a model of several buckets keeps two, one
// filling while the other is in flight. And what an engine holds is what
// DataParallel::memory_of (the memory estimate's figures) says it would, for every stage,
// bucket size, chunk count and expert parallelism.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "core/threads.h"
#include "model/gpt.h"
#include "parallel/data_parallel/data_parallel.h"
#include "parallel/expert_parallel/token_dispatcher.h"
#include "parallel/parallel_context.h"

namespace mt {
namespace {

struct Grads {
  size_t bytes = 0, buffer_bytes = 0;
  size_t shard = 0, edge_bucket = 0, block_bucket = 0;  // floats
  int block_buckets = 0;
};

Grads grad_memory(int zero, double bucket_mb, int layers = 3) {
  ModelConfig cfg;
  cfg.layers = layers, cfg.dim = 32, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19;
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

TEST(DataParallelMemory, Zero2BuffersForAModelOfOneBlockBucket) {
  const Grads z1 = grad_memory(1, 25, 1), z2 = grad_memory(2, 25, 1);
  ASSERT_EQ(z2.block_buckets, 1);  // the one block in one bucket, the edge unit in another
  // The shard plus the two actual buckets, which together are the flat gradients.
  EXPECT_EQ(z2.buffer_bytes, (z2.edge_bucket + z2.block_bucket) * sizeof(float));
  EXPECT_EQ(z2.bytes, (z2.shard + z2.edge_bucket + z2.block_bucket) * sizeof(float));
  EXPECT_EQ(z2.bytes, z1.bytes + z1.bytes / 4);  // ZeRO-1 holds the flat gradients
}

TEST(DataParallelMemory, Zero2KeepsTwoBlockBuffersForSeveralBuckets) {
  for (double bucket_mb : {0.001, 25.0}) {  // one block per bucket: by size, by kBlockBuckets
    const Grads z2 = grad_memory(2, bucket_mb);
    ASSERT_EQ(z2.block_buckets, 3) << bucket_mb;
    EXPECT_EQ(z2.buffer_bytes, (z2.edge_bucket + 2 * z2.block_bucket) * sizeof(float));
    EXPECT_EQ(z2.bytes, z2.shard * sizeof(float) + z2.buffer_bytes);
  }
}

// Every field of the engine's memory() against memory_of for the model's units, on every
// rank: dp 4 (or dp 2 x ep 2 with experts), ZeRO 0-3, one bucket or a bucket per block,
// one chunk or the two chunks of an interleaved stage.
// Returns rank 0's layout's block buckets (count, largest) and its grad_buffer_bytes.
struct EngineBuckets {
  int block_buckets = 0;
  size_t block_bucket = 0, edge_bucket = 0, grad_buffer_bytes = 0;
};

EngineBuckets expect_memory_of_matches(int zero, double bucket_mb, int ep, bool two_chunks,
                                       int layers = 4, int moe_every = 2) {
  SCOPED_TRACE(str("zero ", zero, " bucket ", bucket_mb, " ep ", ep, " chunks ", two_chunks ? 2 : 1,
                   " layers ", layers, " moe_every ", moe_every));
  ModelConfig cfg;
  cfg.layers = layers, cfg.dim = 32, cfg.heads = 2, cfg.seq = 8, cfg.vocab = 19;
  if (ep > 1) cfg.experts = 4, cfg.moe_every = moe_every;
  EngineBuckets out;
  const std::vector<ChunkSpec> chunks =
      two_chunks ? std::vector<ChunkSpec>{{0, 2, true, false}, {2, 4, false, true}}
                 : GPT::whole_model(cfg);
  run_local(4, WorldOptions{}, [&](CommWorld& w) {
    set_compute_threads(1);
    ParallelContext ctx = make_parallel_context(w, MeshShape{1, 4, 1, ep});
    TokenDispatcher dispatcher(ctx.ep);
    const ExpertParallelShard shard{ctx.coord.ep_rank, ep, ep > 1 ? &dispatcher : nullptr};
    GPT model(cfg, chunks, TensorParallelShard{}, 2, shard);
    std::vector<std::pair<size_t, size_t>> ranges;
    std::vector<int> per_chunk;
    for (int c = 0; c < model.num_chunks(); ++c) {
      for (int u = 0; u < model.chunk(c).num_units(); ++u)
        ranges.push_back(model.chunk(c).unit_range(u));
      per_chunk.push_back(model.chunk(c).num_units());
    }
    size_t experts = 0;
    for (const ParamInfo& p : model.table().entries())
      if (ep > 1 && is_expert_param(p.name)) experts += p.numel;
    const DataParallelMemory want =
        DataParallel::memory_of(ranges, per_chunk, 4, zero, bucket_mb, experts, ep > 1);
    DataParallel dp(model, {ctx.dp, zero, bucket_mb, ctx.ep, ctx.ep_replica});
    const DataParallelMemory got = dp.memory();
    EXPECT_EQ(got.params_bytes, want.params_bytes) << "rank " << w.rank();
    EXPECT_EQ(got.grads_bytes, want.grads_bytes) << "rank " << w.rank();
    EXPECT_EQ(got.param_buffer_bytes, want.param_buffer_bytes) << "rank " << w.rank();
    EXPECT_EQ(got.grad_buffer_bytes, want.grad_buffer_bytes) << "rank " << w.rank();
    EXPECT_EQ(got.expert_copy_bytes, want.expert_copy_bytes) << "rank " << w.rank();
    if (w.rank() != 0) return;
    out.grad_buffer_bytes = got.grad_buffer_bytes;
    for (const FlatBucket& b : dp.layout().buckets()) {
      if (dp.layout().is_edge(b.units[0])) {
        out.edge_bucket = std::max(out.edge_bucket, b.size());
      } else {
        out.block_bucket = std::max(out.block_bucket, b.size());
        ++out.block_buckets;
      }
    }
  });
  return out;
}

TEST(DataParallelMemory, MemoryOfIsWhatTheEngineHolds) {
  for (int zero = 0; zero <= 3; ++zero)
    for (double bucket_mb : {25.0, 0.001})
      for (bool two_chunks : {false, true})
        expect_memory_of_matches(zero, bucket_mb, 1, two_chunks);
  for (int zero = 0; zero <= 2; ++zero) expect_memory_of_matches(zero, 0.001, 2, false);
}

// ZeRO 2 under expert parallelism (dp 4 x ep 2, twelve MoE blocks): the blocks go in
// buckets of four (a quarter, rounded up to whole blocks per rank), so the pool holds two
// buffers of four blocks where one bucket of all twelve was kept before stop 48, and
// memory_of counts the same.
TEST(DataParallelMemory, Zero2UnderEpKeepsTwoBuffersOfWholeBlocksPerRank) {
  const EngineBuckets b = expect_memory_of_matches(2, 25.0, 2, false, 12, 1);
  EXPECT_EQ(b.block_buckets, 3);
  EXPECT_EQ(b.grad_buffer_bytes, (b.edge_bucket + 2 * b.block_bucket) * sizeof(float));
  const EngineBuckets one = expect_memory_of_matches(2, 25.0, 2, false, 1, 1);  // one block
  EXPECT_EQ(b.block_bucket, 4 * one.block_bucket);
}

}  // namespace
}  // namespace mt
