// A local plan's memory is a function of its profile, not of the CPU that runs the planner
// (model/kernel_target.h, KernelTarget::profile): the attention kernel, its saved form and
// scratch come from the profile's attention_kernels (or, in an older profile, its
// attention_row_stats[_bf16]); the flash kernel's scratch from the plan's --threads; the bf16
// linears' weight-gradient scratch is the most any CPU's path keeps. Each test moves one thing
// the host decides (ScopedAttentionIsa stands in for another CPU's attention kernels, the
// OpenMP team, the bf16 GEMM path), checks that it moves this host's estimate (the lever is
// live), and that the local plan's figures stay where they were.
#include <gtest/gtest.h>
#include <omp.h>

#include "kernels/attention.h"
#include "kernels/matmul_bf16.h"
#include "plan/hardware_profile.h"
#include "plan/layout.h"
#include "plan/memory_model.h"
#include "plan_test_util.h"
#include "schedule/schedule.h"
#include "train/memory_estimate.h"

namespace mt::plan {
namespace {

// The golden cases' model (bench/planner/golden_cases.py MEDIUM, 2 layers): head dim 32,
// which every attention kernel takes.
PlanRequest local_request() {
  PlanRequest r = testing::small_request(1);
  r.model.layers = 2, r.model.dim = 256, r.model.heads = 8, r.model.seq = 128;
  return r;
}

Layout one_rank(Precision precision, const char* recompute = "none") {
  Layout l;
  l.micro_batch = 8, l.precision = precision, l.recompute = recompute_of(recompute);
  return l;
}

AttentionIsa isa(int bits) {
  return AttentionIsa::from_bits(bits);
}
// CPUs: none of the tiles (a build without AVX-512), AVX-512 only, AVX512-BF16 without AMX
// (the EPYC the golden profile was calibrated on), and AMX (every kernel).
const int kCpus[] = {0, 1, 3, 15};

MemoryEstimate host_estimate(const PlanRequest& r, const Layout& l) {
  return estimate_rank_memory(train_options(r, l), Schedule{}, KernelTarget::this_host);
}

std::string name(int profile, int host, const Layout& l) {
  return "profile " + std::to_string(profile) + " host " + std::to_string(host) +
         (l.precision == Precision::bf16 ? " bf16" : " fp32") +
         (l.recompute == Recompute::selective ? " selective" : "");
}

// The golden failure of stop 47's note: the same profile planned on hosts with other attention
// kernels gives the same memory, and that memory is what this engine would count on the
// profile's CPU (this host's estimate with the profile's kernels, the plan's team and the bf16
// GEMM path whose scratch is the largest).
TEST(PlanLocalHostIndependence, AttentionMemoryFollowsTheProfileNotTheHost) {
  for (const Layout& l : {one_rank(Precision::fp32), one_rank(Precision::fp32, "selective"),
                          one_rank(Precision::bf16), one_rank(Precision::bf16, "selective")}) {
    if (l.precision == Precision::bf16 && !bf16_matmul_supported()) continue;
    {  // the lever: this host's estimate moves with the attention kernels
      const ScopedAttentionIsa none(isa(0));
      const int64_t without = host_estimate(local_request(), l).peak();
      const ScopedAttentionIsa tiles(isa(3));
      EXPECT_GT(without, host_estimate(local_request(), l).peak()) << name(3, 3, l);
    }
    for (const int profile : kCpus) {
      PlanRequest r = local_request();
      r.hardware.attention_kernels = profile;
      PlannedMemory first;
      for (const int host : kCpus) {
        const ScopedAttentionIsa simulated(isa(host));
        const PlannedMemory m = planned_memory(r, l, Schedule{});
        if (host == kCpus[0])
          first = m;
        else
          testing::expect_same_memory(first, m, name(profile, host, l));
      }
      // What the engine counts on the profile's CPU.
      const ScopedAttentionIsa simulated(isa(profile));
      const ScopedBf16GemmPath widest(Bf16GemmPath::primitive);
      const MemoryEstimate e = host_estimate(r, l);
      EXPECT_EQ(first.activations, e.activations_bytes) << name(profile, profile, l);
      EXPECT_EQ(first.total(), e.peak()) << name(profile, profile, l);
    }
  }
}

// A profile written before attention_kernels: its attention_row_stats[_bf16] name the
// register tiles (the golden profile has neither: the probabilities' kernels).
TEST(PlanLocalHostIndependence, AnOlderProfileCountsTheTilesItsRowStatsName) {
  for (const Precision p : {Precision::fp32, Precision::bf16}) {
    if (p == Precision::bf16 && !bf16_matmul_supported()) continue;
    const Layout l = one_rank(p);
    PlanRequest stats = local_request(), none = local_request(), bits = local_request();
    stats.hardware.attention_row_stats = stats.hardware.attention_row_stats_bf16 = 1;
    bits.hardware.attention_kernels = 3;
    const ScopedAttentionIsa simulated(isa(0));
    const PlannedMemory m = planned_memory(stats, l, Schedule{});
    testing::expect_same_memory(m, planned_memory(bits, l, Schedule{}), "row stats as the tiles");
    EXPECT_LT(m.activations, planned_memory(none, l, Schedule{}).activations);
  }
}

// The flash kernel's scratch (the llama block) grows with its OpenMP team: a local plan
// counts the plan's --threads, not the planner's team.
TEST(PlanLocalHostIndependence, LlamaPlanFollowsThePlansThreadsNotThePlannersTeam) {
  PlanRequest r = local_request();
  r.model.arch = Arch::llama;
  const int saved = omp_get_max_threads();
  for (const Precision p : {Precision::fp32, Precision::bf16}) {
    if (p == Precision::bf16 && !bf16_matmul_supported()) continue;
    const Layout l = one_rank(p);
    omp_set_num_threads(1);
    const int64_t host1 = host_estimate(r, l).total();
    const PlannedMemory one = planned_memory(r, l, Schedule{});
    omp_set_num_threads(6);
    EXPECT_NE(host1, host_estimate(r, l).total());  // the lever
    testing::expect_same_memory(one, planned_memory(r, l, Schedule{}),
                                p == Precision::bf16 ? "bf16" : "fp32");
    PlanRequest two = r;
    two.threads = 2;
    EXPECT_GT(planned_memory(two, l, Schedule{}).buffers, one.buffers);  // the plan's threads
  }
  omp_set_num_threads(saved);
}

// The bf16 linears' weight gradient keeps a transposed copy of dout on the primitive path
// only (kernels/matmul_bf16.h): a local plan counts it whichever path this host takes.
TEST(PlanLocalHostIndependence, Bf16PlanDoesNotFollowTheHostsGemmPath) {
  if (!bf16_matmul_supported()) GTEST_SKIP() << "no bf16 matmul on this CPU";
  const PlanRequest r = local_request();
  const Layout l = one_rank(Precision::bf16);
  PlannedMemory primitive;
  int64_t host_primitive = 0;
  {
    const ScopedBf16GemmPath path(Bf16GemmPath::primitive);
    primitive = planned_memory(r, l, Schedule{});
    host_primitive = host_estimate(r, l).total();
  }
  int others = 0;
  for (const Bf16GemmPath other : {Bf16GemmPath::jit_gemm, Bf16GemmPath::mixed}) {
    if (!matmul_bf16_path_available(other)) continue;
    const ScopedBf16GemmPath path(other);
    EXPECT_GT(host_primitive, host_estimate(r, l).total());  // the lever
    testing::expect_same_memory(primitive, planned_memory(r, l, Schedule{}), "bf16 path");
    ++others;
  }
  if (others == 0) GTEST_SKIP() << "only the primitive path on this CPU";
}

}  // namespace
}  // namespace mt::plan
