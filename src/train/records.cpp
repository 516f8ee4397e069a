#include "train/records.h"

#include <cstdio>
#include <iterator>
#include <optional>
#include <string>

namespace mt {

namespace {

// A uint64 as 16 hex digits: JSON readers would round it as a number.
std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

MemoryRecord own_memory(Session& s, const MicrobatchStats& st) {
  const DataParallelMemory dm = s.dp.memory();
  MemoryRecord m;
  m.params_bytes = int64_t(dm.params_bytes);
  m.grads_bytes = int64_t(dm.grads_bytes);
  m.optimizer_bytes = int64_t(s.opt.state_bytes());
  m.activations_peak_bytes = int64_t(s.model.activation_peak_bytes());
  m.gather_buffer_bytes = int64_t(dm.param_buffer_bytes);
  m.grad_buffer_bytes = int64_t(dm.grad_buffer_bytes);
  m.microbatches_in_flight_peak = s.pipelined() ? st.peak_in_flight : 1;
  m.bf16_weight_bytes = int64_t(s.model.bf16_weight_bytes());
  return m;
}

// A group's traffic as <group>_comm_bytes, _calls and _wait_s, where the run has the group.
void add_group_comm(nlohmann::json& j, const std::string& group,
                    const std::optional<GroupComm>& c) {
  if (!c) return;
  j[group + "_comm_bytes"] = c->bytes;
  j[group + "_comm_calls"] = c->calls;
  j[group + "_comm_wait_s"] = c->wait_s;
}

}  // namespace

std::vector<MemoryRecord> gather_memory_records(Session& s, const MicrobatchStats& first_step) {
  constexpr int64_t MemoryRecord::*kFields[] = {&MemoryRecord::params_bytes,
                                                &MemoryRecord::grads_bytes,
                                                &MemoryRecord::optimizer_bytes,
                                                &MemoryRecord::activations_peak_bytes,
                                                &MemoryRecord::gather_buffer_bytes,
                                                &MemoryRecord::grad_buffer_bytes,
                                                &MemoryRecord::microbatches_in_flight_peak,
                                                &MemoryRecord::bf16_weight_bytes};
  constexpr size_t kN = std::size(kFields);
  // Each rank fills its own row; a sum over the world leaves every row on every rank.
  const size_t ranks = size_t(s.ctx.world_size);
  std::vector<int64_t> rows(kN * ranks, 0);
  const MemoryRecord mine = own_memory(s, first_step);
  for (size_t f = 0; f < kN; ++f) rows[kN * size_t(s.ctx.rank) + f] = mine.*kFields[f];
  s.ctx.world->all_reduce(rows.data(), rows.data(), rows.size(), DType::i64, ReduceOp::sum).wait();
  std::vector<MemoryRecord> all(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t f = 0; f < kN; ++f) all[r].*kFields[f] = rows[kN * r + f];
    all[r].precision = s.opts.optim.precision;
    all[r].gemm_isa = s.info.gemm_isa;
    all[r].expert_gemm_isa = s.info.expert_gemm_isa;
  }
  return all;
}

nlohmann::json to_json(const StepRecord& r, const MoeMetrics& moe) {
  nlohmann::json j = {{"step", r.step},
                      {"loss", r.loss},
                      {"lr", r.lr},
                      {"grad_norm", r.grad_norm},
                      {"step_time_s", r.step_time_s},
                      {"tokens_per_s", r.tokens_per_s},
                      {"mfu", r.mfu},
                      {"comm_exposed_s", r.comm_exposed_s},
                      {"comm_bytes", r.comm_bytes},
                      {"data_hash", hex16(r.data_hash)}};
  if (r.bubble) {
    j["bubble"] = r.bubble->measured;
    j["bubble_theory"] = r.bubble->theory;
  }
  add_group_comm(j, "tp", r.tp);
  add_group_comm(j, "cp", r.cp);
  add_group_comm(j, "ep", r.ep);
  moe.add_to(j);
  if (r.val_loss) j["val_loss"] = *r.val_loss;
  return j;
}

nlohmann::json to_json(int rank, const MemoryRecord& m) {
  nlohmann::json j = {{"event", "memory"},
                      {"rank", rank},
                      {"params_bytes", m.params_bytes},
                      {"grads_bytes", m.grads_bytes},
                      {"optimizer_bytes", m.optimizer_bytes},
                      {"activations_peak_bytes", m.activations_peak_bytes},
                      {"gather_buffer_bytes", m.gather_buffer_bytes},
                      {"grad_buffer_bytes", m.grad_buffer_bytes},
                      {"microbatches_in_flight_peak", m.microbatches_in_flight_peak}};
  // Only a bf16 run adds its keys: an fp32 record is what it was before the flag existed.
  if (m.precision != Precision::fp32) {
    j["precision"] = precision_name(m.precision);
    j["bf16_weight_bytes"] = m.bf16_weight_bytes;
    j["gemm_isa"] = m.gemm_isa;
  }
  if (!m.expert_gemm_isa.empty()) j["expert_gemm_isa"] = m.expert_gemm_isa;
  return j;
}

}  // namespace mt
