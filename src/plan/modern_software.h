// The software tables of the modern published runs (software_profiles.h has the format and
// the older tables): Llama 3 405B's stack ("The Llama 3 Herd of Models", Meta 2024),
// DeepSeek-V3's (its technical report, DeepSeek-AI 2024) and Megatron-Core under
// Megatron-Bridge's DGX-H100 recipes (NeMo 25.09), MegaScale's (NSDI 2024) and Megatron-Core
// r0.8.0's as Megatron-LM's README ran its H100 weak-scaling table (commit f2e5db402c). Each
// row cites the section, recipe or code line its value comes from; what the source does not
// state says so.
#pragma once

#include "plan/software_profiles.h"

namespace mt::plan {

inline constexpr const char* kKorthikantiMemory =
    "Korthikanti et al. 2022 Table 2 per-layer activations (as Megatron-LM's "
    "theoretical_memory_usage.py), 16-bit weights, fp32 master and Adam moments";
// Mainline Megatron-LM's pipeline schedules (megatron/schedules.py, then
// megatron/core/pipeline_parallel/schedules.py): no pipelining, 1F1B, interleaved 1F1B.
inline constexpr const char* kMegatronNoDualPipe =
    "not offered: Megatron-LM has no DualPipe-V -- its schedules (megatron/schedules.py, "
    "later megatron/core/pipeline_parallel/schedules.py) are no pipelining, 1F1B and "
    "interleaved 1F1B; DualPipe is DeepSeek's (DeepSeek-V3 report, Dec 2024), and mainline "
    "Megatron-LM did not take it in (NVIDIA/Megatron-LM PR 5254, a port, closed)";

SoftwareTable llama3_2024();           // --software llama3-2024
SoftwareTable deepseek_v3_2024();      // --software deepseek-v3-2024
SoftwareTable megatron_bridge_2025();  // --software megatron-bridge-2025
SoftwareTable megascale_2024();        // --software megascale-2024
SoftwareTable megatron_core_2024();    // --software megatron-core-2024

}  // namespace mt::plan
