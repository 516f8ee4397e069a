// The local cp ring's hops as the ranks' CPU (docs/planner.md, "The cp ring's hop CPU"):
// where the profile has cp_hop_s / cp_hop_byte_s (plan/cp_exchange_probe.cpp), each hop
// adds that CPU to the rank's passes (cp - 1 K/V hops forward; cp - 1 K/V and cp dK/dV hops
// backward); a profile without them keeps the hidden-transfer pricing and --explain says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "plan/calibration_probes.h"
#include "plan/profile_fields.h"
#include "plan/time_model.h"
#include "plan_test_util.h"

namespace mt::plan {
namespace {

PlanRequest llama_request(double hop_s, double byte_s) {
  PlanRequest r = testing::small_request(2);
  r.model.arch = Arch::llama;
  r.model.kv_heads = 2;
  r.hardware.attention_fwd_flops = r.hardware.attention_bwd_flops = 10e9;
  r.hardware.cp2_attention_factor = 1.2, r.hardware.cp4_attention_factor = 1.6;
  // Fast sends: the old pricing's hops hide under every step.
  r.hardware.p2p_bw_intra = r.hardware.p2p_bw_inter = 1e15;
  r.hardware.cp_hop_s = hop_s;
  r.hardware.cp_hop_byte_s = byte_s;
  return r;
}

StageCosts cp_stage(const PlanRequest& r, int cp, CpComm comm = CpComm::ring) {
  Layout l;
  l.cp = cp, l.cp_comm = comm, l.micro_batch = 8;
  return stage_costs(r, l)[0];
}

TEST(PlanCpExchange, EachHopAddsItsFixedCpuToTheRank) {
  const StageCosts old = cp_stage(llama_request(0, 0), 2);
  EXPECT_EQ(old.cp_comm, 0);  // hidden under the attention
  const double hop = 1e-4;
  for (int cp : {2, 4}) {
    const StageCosts before = cp_stage(llama_request(0, 0), cp);
    const StageCosts s = cp_stage(llama_request(hop, 0), cp);
    const double layers = llama_request(0, 0).model.layers;
    // Forward: cp - 1 K/V hops a layer; backward: cp - 1 K/V hops and cp dK/dV hops.
    EXPECT_NEAR(s.forward - before.forward, layers * (cp - 1) * hop, 1e-9) << cp;
    EXPECT_NEAR(s.backward - before.backward, layers * (2 * cp - 1) * hop, 1e-9) << cp;
    EXPECT_NEAR(s.cp_comm, layers * (3 * cp - 2) * hop, 1e-9) << cp;
  }
}

TEST(PlanCpExchange, TheBytesAreTheRanksBlock) {
  const PlanRequest r = llama_request(0, 1e-9);
  // The rank's block: 8 sequences x 32 / 2 rows x (K | V: 2 kv heads of 16) fp32.
  const double block = 8.0 * 16 * 2 * 2 * 16 * 4;
  const StageCosts before = cp_stage(llama_request(0, 0), 2), s = cp_stage(r, 2);
  EXPECT_NEAR(s.forward - before.forward, r.model.layers * block * 1e-9, 1e-12);
  EXPECT_NEAR(s.backward - before.backward, r.model.layers * 3 * block * 1e-9, 1e-12);
}

TEST(PlanCpExchange, OnlyTheLocalRingIsPricedSo) {
  // The all-gather keeps its collectives; a GPU profile its links.
  EXPECT_DOUBLE_EQ(cp_stage(llama_request(1e-4, 0), 2, CpComm::allgather).forward,
                   cp_stage(llama_request(0, 0), 2, CpComm::allgather).forward);
  PlanRequest gpu = llama_request(1e-4, 0), gpu_old = llama_request(0, 0);
  gpu.hardware.local = gpu_old.hardware.local = false;
  EXPECT_DOUBLE_EQ(cp_stage(gpu, 2).forward, cp_stage(gpu_old, 2).forward);
}

TEST(PlanCpExchange, ExplainSaysWhichPricingTheProfileGets) {
  const auto mentions = [](const PlanRequest& r, const std::string& text) {
    const std::vector<std::string> lines = time_assumptions(r);
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(mentions(llama_request(0, 0), "this profile has no cp hop CPU"));
  EXPECT_TRUE(mentions(llama_request(4e-6, 2.5e-11), "each ring hop is 4 us + 0.0256 us per KiB"));
}

TEST(PlanCpExchange, TheProfileFieldsAreFiniteAndOptional) {
  const std::string base =
      "[hardware]\nname = \"x\"\nlocal = true\nmemory_bytes = 8e10\npeak_fp32 = 1e11\n"
      "memory_bw = 1e10\nintra_busbw = 1e10\np2p_bw_intra = 1e10\n";
  const HardwareProfile old = parse_profile_toml(base, "old.toml");
  EXPECT_EQ(old.cp_hop_s, 0);
  EXPECT_EQ(old.cp_hop_byte_s, 0);
  const HardwareProfile h =
      parse_profile_toml(base + "cp_hop_s = 4e-6\ncp_hop_byte_s = 2.5e-11\n", "new.toml");
  EXPECT_EQ(h.cp_hop_s, 4e-6);
  EXPECT_EQ(h.cp_hop_byte_s, 2.5e-11);
  for (const std::string bad : {"cp_hop_s = nan", "cp_hop_s = inf", "cp_hop_byte_s = nan",
                                "cp_hop_byte_s = -inf", "cp_hop_s = -1e-6"})
    EXPECT_THROW(parse_profile_toml(base + bad + "\n", "bad.toml"), UsageError) << bad;
}

TEST(PlanCpExchange, TheProbeReadsTheHopsCopyPerByte) {
  // The ring's own calls between 2 rank threads: the block's copy is the per-byte part
  // (between 0.1 GB/s and 1 TB/s of one thread's CPU), the requests and waits the fixed one.
  const CpHopCost c = cp_hop_cost(2, 0.02);
  EXPECT_TRUE(std::isfinite(c.fixed_s) && std::isfinite(c.per_byte_s));
  EXPECT_GE(c.fixed_s, 0);
  EXPECT_LT(c.fixed_s, 1e-3);
  EXPECT_GT(c.per_byte_s, 1e-12);
  EXPECT_LT(c.per_byte_s, 1e-8);
}

}  // namespace
}  // namespace mt::plan
