// The metrics file's records (docs/contracts.md §6) as structs with named fields, and their JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/session.h"
#include "train/step.h"

namespace mt {

// What one rank holds, after its first step.
struct MemoryRecord {
  int64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
  int64_t activations_peak_bytes = 0;
  int64_t gather_buffer_bytes = 0;  // ZeRO-3 gather buffers (part of params_bytes)
  int64_t grad_buffer_bytes = 0;    // ZeRO-2/3 bucket pool (part of grads_bytes)
  // Microbatches holding activations at once: the schedule's in-flight peak under pp
  // (1f1b: stages - stage, gpipe: all), one otherwise.
  int64_t microbatches_in_flight_peak = 0;
  // --precision bf16: the linears' bf16 weight copies (not part of params_bytes), and what
  // every rank shares: the precision and oneDNN's bf16 matmul implementation.
  int64_t bf16_weight_bytes = 0;
  Precision precision = Precision::fp32;
  std::string gemm_isa;
  std::string expert_gemm_isa;  // with experts: RunInfo::expert_gemm_isa
};

// Every rank's record, in rank order, on every rank. Collective over the world.
std::vector<MemoryRecord> gather_memory_records(Session& s, const MicrobatchStats& first_step);

// The per-step record, with the routing metrics of the step's last MoeMetrics::reduce.
nlohmann::json to_json(const StepRecord& r, const MoeMetrics& moe);
nlohmann::json to_json(int rank, const MemoryRecord& m);

}  // namespace mt
