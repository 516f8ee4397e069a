// How the training software a plan is for behaves: one commented table per software (as
// NCCL's tuning.cc keeps its constants), each row one software field of HardwareProfile
// (hardware_profile.h says what the time model does with it), its value and where the value
// comes from. The time model reads only the fields; --explain prints them with these sources,
// so what it says is what the code computes with.
//   meshtrain         meshtrain's engine as the GPU model assumes it (the presets' default)
//   megatron-lm-2021  Megatron-LM as run by Narayanan et al. 2021 (fp16)
//   megatron-lm-2022  Megatron-LM as run by Korthikanti et al. 2022 (bf16, SP)
//   (modern_software.h: llama3-2024, deepseek-v3-2024, megatron-bridge-2025, megascale-2024,
//   megatron-core-2024, the last Megatron-Core r0.8.0 as the README's H100 table ran it)
//   meshtrain-local   meshtrain's own CPU engine: every local profile (not a --software)
#pragma once

#include <string>
#include <vector>

#include "plan/hardware_profile.h"

namespace mt::plan {

struct SoftwareSetting {
  const char* key;     // a software field of plan/profile_fields.h
  double value;        // booleans as 0 or 1
  const char* source;  // why this value: the software's code or paper
};

struct SoftwareTable {
  const char* name;
  std::vector<std::string> schedules;     // pipeline schedules it has (empty: all of ours)
  std::vector<SoftwareSetting> settings;  // every software field, once
  // Whether it has DualPipe-V (the schedule is in `schedules`, or they are all ours) and the
  // source that says so: --explain prints it, and a --schedule it does not have is refused
  // with it.
  const char* dualpipev = "";
};

// A fixed --schedule the software does not have: UsageError with its schedules (and, for
// DualPipe-V, the source that says it has none). Local profiles have every schedule.
void require_software_schedule(const HardwareProfile& h, const std::string& schedule);

// Every table, the GPU ones first (software_names()), then meshtrain-local.
const std::vector<SoftwareTable>& software_tables();
const SoftwareTable& software_table(const std::string& name);  // UsageError when unknown

// The software every local profile has.
inline constexpr const char* kLocalSoftware = "meshtrain-local";

// --explain: one line per software field, with the value the code uses and its source (and
// the table's own value when a hardware file changed it).
std::vector<std::string> software_lines(const HardwareProfile& h);

}  // namespace mt::plan
