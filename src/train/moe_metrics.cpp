#include "train/moe_metrics.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "model/block.h"

namespace mt {

MoeMetrics::MoeMetrics(const ModelConfig& cfg, std::vector<MoeLayer*> local, Communicator* dp,
                       Communicator* pp)
    : E_(cfg.experts), local_(std::move(local)), dp_(dp), pp_(pp) {
  for (int l = 0; l < cfg.layers; ++l)
    if (is_moe_layer(cfg, l)) blocks_.push_back(l);
  for (MoeLayer* m : local_) {
    const auto it = std::find(blocks_.begin(), blocks_.end(), m->layer());
    MT_CHECK(it != blocks_.end(), "block ", m->layer(), " holds a MoE layer it should not");
    local_pos_.push_back(int(it - blocks_.begin()));
  }
  last_.resize(blocks_.size());
}

void MoeMetrics::begin_step() {
  for (MoeLayer* m : local_) m->reset_stats();
}

void MoeMetrics::set_recording(bool on) {
  for (MoeLayer* m : local_) m->set_record_stats(on);
}

void MoeMetrics::reduce() {
  if (!enabled()) return;
  const size_t n = blocks_.size(), per = size_t(E_) + 3;  // loads, assignments, dropped, groups
  // Whole-model buffers, zero where another stage holds the layer: a sum over pp then
  // assembles them (each entry has exactly one non-zero contributor, so it is exact).
  std::vector<int64_t> counts(n * per, 0);
  std::vector<double> aux(n, 0.0);
  for (size_t i = 0; i < local_.size(); ++i) {
    const MoeStepMetrics m = reduce_moe_metrics(*local_[i], dp_);  // collective over dp
    int64_t* c = counts.data() + size_t(local_pos_[i]) * per;
    std::copy(m.expert_load.begin(), m.expert_load.end(), c);
    c[E_] = m.assignments;
    c[E_ + 1] = m.dropped;
    c[E_ + 2] = m.groups;
    aux[size_t(local_pos_[i])] = m.aux_sum;
  }
  if (pp_ && pp_->size() > 1) {
    pp_->all_reduce(counts.data(), counts.data(), counts.size(), DType::i64, ReduceOp::sum).wait();
    // No f64 in the communicators: gather the bytes, add in stage order.
    std::vector<double> all(n * size_t(pp_->size()));
    pp_->all_gather(aux.data(), all.data(), n * sizeof(double), DType::u8).wait();
    for (size_t i = 0; i < n; ++i) {
      aux[i] = 0;
      for (int s = 0; s < pp_->size(); ++s) aux[i] += all[size_t(s) * n + i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t* c = counts.data() + i * per;
    MoeStepMetrics& m = last_[i];
    m.expert_load.assign(c, c + E_);
    m.assignments = c[E_];
    m.dropped = c[E_ + 1];
    m.groups = c[E_ + 2];
    m.aux_sum = aux[i];
    derive_moe_rates(m);
  }
}

void MoeMetrics::add_to(nlohmann::json& record) const {
  if (!enabled()) return;
  double aux = 0;
  int64_t assignments = 0, dropped = 0;
  nlohmann::json loads = nlohmann::json::array();
  for (const MoeStepMetrics& m : last_) {
    aux += m.aux_loss;
    assignments += m.assignments;
    dropped += m.dropped;
    loads.push_back(m.expert_load);
  }
  record["aux_loss"] = aux;
  record["dropped_frac"] = assignments > 0 ? double(dropped) / double(assignments) : 0.0;
  record["expert_load"] = loads;
}

std::vector<std::string> MoeMetrics::summary(int step) const {
  std::vector<std::string> lines;
  for (size_t i = 0; i < last_.size(); ++i) {
    const auto& load = last_[i].expert_load;
    if (load.empty()) continue;  // before the first reduce()
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    lines.push_back(str("step ", step, ": moe block ", blocks_[i], " tokens/expert min ", *lo,
                        " max ", *hi, ", dropped ", 100 * last_[i].dropped_frac, "%, aux ",
                        last_[i].aux_loss));
  }
  return lines;
}

}  // namespace mt
