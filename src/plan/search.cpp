#include "plan/search.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.h"
#include "plan/gpu_memory.h"
#include "plan/memory_bounds.h"
#include "plan/model_flops.h"
#include "plan/software_profiles.h"
#include "plan/work_budget.h"

namespace mt::plan {

namespace {

// The divisors of n up to limit, ascending (pairs up to sqrt(n): a prime GPU count near
// 2^31 costs 46,341 steps, not 2^31 of them).
std::vector<int> divisors(int64_t n, int64_t limit) {
  std::vector<int> low, high;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    if (i <= limit) low.push_back(int(i));
    if (i != n / i && n / i <= limit) high.push_back(int(n / i));
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

template <typename T>
std::vector<T> choices(const std::optional<T>& fixed, std::vector<T> all) {
  if (fixed) return {*fixed};
  return all;
}

using ScheduleKey = std::tuple<std::string, int, int, int>;

void fill_rates(const PlanRequest& r, Candidate& c) {
  const double flops = model_flops_per_step(r.model, r.batch, r.attention);
  c.tokens_per_s = double(r.batch) * r.model.seq / c.time.step_s;
  c.model_tflops_per_device = flops / c.time.step_s / c.layout.world() / 1e12;
  const double peak = r.hardware.local ? peak_flops(r.hardware, c.layout.precision) * r.threads
                                       : peak_flops(r.hardware, c.layout.precision);
  c.mfu = c.model_tflops_per_device * 1e12 / peak;
}

// The remedy for the smallest footprint that did not fit: what dominates it, and the
// knobs that shrink that part (only those the user left open or could raise).
std::string remedy(const PlanRequest& r, const Candidate& c) {
  const PlannedMemory& m = c.memory;
  const Layout& l = c.layout;
  const int64_t state = m.params + m.grads + m.optimizer + m.buffers;
  std::vector<std::string> tips;
  // Only knobs that would change the smallest layout; a fixed one is named as fixed.
  auto tip = [&](bool applies, bool fixed, const std::string& what) {
    if (applies) tips.push_back(what + (fixed ? " (fixed by you)" : ""));
  };
  std::string what;
  if (state >= m.activations) {
    what = str("model state dominates (", m.params + m.grads + m.optimizer + m.buffers,
               " bytes of parameters, gradients, optimizer state and buffers)");
    tip(l.zero < 3 && l.dp > 1, r.zero.has_value(), "--zero 3");
    tip(true, r.tp.has_value() || r.pp.has_value(), "larger --tp or --pp");
    tip(true, false, "more --gpus");
  } else {
    what = str("activations dominate (", m.activations, " bytes)");
    tip(l.recompute != Recompute::full, r.recompute.has_value(), "--recompute full");
    tip(l.micro_batch > 1, r.micro_batch.has_value(), "a smaller --micro-batch");
    tip(l.tp > 1 && !l.sequence_parallel, r.sequence_parallel.has_value(), "--sequence-parallel");
    // Context parallelism splits every activation by the sequence, where the software has it.
    const bool cp_can_grow = !r.hardware.local && l.cp < r.hardware.max_cp &&
                             r.model.seq % (4 * int64_t(l.cp)) == 0 && l.data_ranks() > 1;
    tip(cp_can_grow, r.cp.has_value(), "a larger --cp (each rank keeps seq/cp of the tokens)");
    tip(true, r.tp.has_value() || r.pp.has_value(), "larger --tp or --pp");
    tip(true, false, "a smaller --batch or --seq");
  }
  std::string list;
  for (size_t i = 0; i < tips.size(); ++i)
    list += (i == 0 ? "" : i + 1 == tips.size() ? ", or " : ", ") + tips[i];
  return what + ": try " + list;
}

// The choices of every knob but tp and pp for one (tp, pp), the fixed ones as given.
struct OpenKnobs {
  std::vector<std::pair<std::string, int>> schedules;  // (schedule, virtual stages)
  std::vector<int> micro_batches, eps, zeros;
  std::vector<bool> sps;
  double count() const {
    return double(schedules.size()) * micro_batches.size() * eps.size() * zeros.size() * sps.size();
  }
};

// (schedule, virtual stages) pairs: without pp the schedule is not used; only the
// schedules the software profile has (Megatron-LM 2021/2022 and Llama 3: 1F1B and
// interleaved, no zb-h1 and no DualPipe-V: software_profiles.cpp says why); a fixed
// schedule the software lacks was refused before (require_software_schedule), a fixed pair
// outside the list is still tried, so that validation says what is wrong with it.
std::vector<std::pair<std::string, int>> schedule_choices(const PlanRequest& r, int pp) {
  std::vector<std::pair<std::string, int>> out = {{"1f1b", 1}};
  if (pp > 1) {
    // DualPipe-V runs 2 chunks per stage (the V); it needs m >= 2 pp, which train's
    // validation checks per candidate.
    out = {{"1f1b", 1}, {"gpipe", 1}, {"zb-h1", 1}};
    if (2 * int64_t(pp) <= r.model.layers) out.push_back({"dualpipev", 2});
    for (int v : {2, 3, 4, 6, 8})
      if (int64_t(pp) * v <= r.model.layers) out.push_back({"interleaved", v});
  }
  const std::vector<std::string>& known = r.hardware.schedules;
  if (!r.hardware.local && !known.empty())
    std::erase_if(out, [&](const auto& sv) {
      return std::find(known.begin(), known.end(), sv.first) == known.end();
    });
  if (r.schedule || r.virtual_stages) {
    std::erase_if(out, [&](const auto& sv) {
      return (r.schedule && *r.schedule != sv.first) ||
             (r.virtual_stages && *r.virtual_stages != sv.second);
    });
    if (out.empty()) out.push_back({r.schedule.value_or("1f1b"), r.virtual_stages.value_or(1)});
  }
  return out;
}

// The micro-batches worth searching under a searched cp > 1: fewer sequences than cp ranks
// (b < cp), so that each rank holds less than one sequence's tokens per microbatch, which no
// cp-1 layout can. With b a multiple of cp the cp-1 layout of dp x cp replicas and
// micro-batch b / cp has the same tokens, attention work and activations per rank and the
// same microbatch count, without cp's K/V exchange: never slower in this model, so not
// searched. b > cp, not a multiple, is left out too: such a rank holds more than a whole
// sequence per microbatch, where cp's one gain, activation memory, comes cheaper from a
// smaller micro-batch. This is what keeps cp open within the work budget (the 175B example).
std::vector<int> cp_micro_batches(const PlanRequest& r, int cp, std::vector<int> all) {
  if (cp <= 1 || r.cp || r.micro_batch) return all;
  std::erase_if(all, [&](int b) { return b >= cp; });
  return all;
}

OpenKnobs open_knobs(const PlanRequest& r, int tp, int pp, int dp, int cp) {
  OpenKnobs k;
  k.schedules = schedule_choices(r, pp);
  k.micro_batches = cp_micro_batches(
      r, cp, choices(r.micro_batch, divisors(r.batch % dp == 0 ? r.batch / dp : 1, 64)));
  std::vector<int> eps = {1};
  if (r.model.experts > 0) {
    eps.clear();
    for (int e : divisors(dp, dp))
      if (r.model.experts % e == 0) eps.push_back(e);
  }
  k.eps = choices(r.ep, eps);
  std::vector<int> zeros = dp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0};
  if (!r.hardware.local)  // the software's ZeRO stages (Megatron-LM 2021/2022: none)
    std::erase_if(zeros, [&](int z) { return z > r.hardware.max_zero; });
  k.zeros = choices(r.zero, zeros);
  k.sps = choices(r.sequence_parallel,
                  tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false});
  return k;
}

// Whether one sequence's activations outweigh the weights in a layer (layer 0; a MoE layer's
// routed experts left out, since cp does not split them either), both 16-bit, unsplit and
// not recomputed. cp divides the activations alone, at the cost of a K/V exchange per layer;
// where the weights weigh more, tp or pp (which split both) or a smaller micro-batch free
// more memory for less, so cp is searched only past this sequence length (Korthikanti et al.
// 2022's 34 s h per layer puts it near s = 0.7 h for a dense GPT: the 175B example's 2K
// sequences are below it, Llama 3 8B's 128K far above). A fixed --cp is planned regardless.
bool activations_dominate_layer(const PlanRequest& r) {
  Layout one;
  one.precision = Precision::bf16;
  double experts = 0;
  const double weights = 2 * rank_block_params(r.model, 0, 1, 1, &experts, r.attention);
  return layer_activation_bytes(r, one, true, false) > weights - 2 * experts;
}

// Context-parallel sizes of GPU software that has them: the divisors of what tp leaves, up
// to the software's largest, that cut the sequence into 2 cp chunks, where a sequence's
// activations dominate its layers; 1 elsewhere.
std::vector<int> cp_choices(const PlanRequest& r, int64_t rest) {
  if (r.hardware.local || r.hardware.max_cp <= 1 || !activations_dominate_layer(r)) return {1};
  std::vector<int> out;
  for (int cp : divisors(rest, r.hardware.max_cp))
    if (r.model.seq % (2 * int64_t(cp)) == 0 || cp == 1) out.push_back(cp);
  return out;
}

// Megatron-LM's interleaved schedule: equal chunks (layers divisible by pp x v) and
// microbatches divisible by pp (its own assertions).
bool software_refuses(const PlanRequest& r, int pp, const std::string& schedule, int v, int m) {
  return !r.hardware.local && r.hardware.even_chunks && schedule == "interleaved" &&
         (r.model.layers % (int64_t(pp) * v) != 0 || m % pp != 0);
}

}  // namespace

// Every combination of the knobs left open (the fixed ones as given), in a fixed order.
// Divisibility beyond dp x tp x pp = devices is left to validate_candidate, so that the
// rules stay train's.
void for_each_layout(const PlanRequest& r, WorkBudget& budget,
                     const std::function<void(const Layout&)>& visit) {
  const int n = r.devices;
  for (auto [name, v] : {std::pair{"--tp", r.tp}, {"--pp", r.pp}, {"--dp", r.dp}, {"--cp", r.cp}})
    MT_REQUIRE(!v || n % *v == 0, name, " ", *v, " does not divide ",
               r.hardware.local ? "--ranks " : "--gpus ", n);
  if (r.schedule) require_software_schedule(r.hardware, *r.schedule);
  std::vector<Precision> precisions = {Precision::fp32};
  if (!r.hardware.local && r.hardware.peak_bf16 > 0) precisions.push_back(Precision::bf16);
  // Full recomputation with experts too (the recomputed forward counts no aux loss, expert
  // load or bias update twice: docs/moe.md).
  std::vector<Recompute> recomputes = {Recompute::none, Recompute::selective, Recompute::full};
  const auto precs = choices(r.precision, precisions);
  const auto rcs = choices(r.recompute, recomputes);
  const CpComm cp_comm =
      r.cp_comm.value_or(r.hardware.cp_allgather ? CpComm::allgather : CpComm::ring);
  for (int tp : choices(r.tp, divisors(n, n)))
    for (int cp : choices(r.cp, cp_choices(r, n / tp)))
      for (int pp : choices(r.pp, divisors(n / tp, std::max(r.model.layers, 1)))) {
        if ((n / tp) % (int64_t(pp) * cp) != 0) continue;
        const int dp = n / (tp * cp * pp);
        if (r.dp && *r.dp != dp) continue;
        const OpenKnobs k = open_knobs(r, tp, pp, dp, cp);
        budget.charge(1 + k.count() * double(rcs.size() * precs.size()));
        for (int ep : k.eps)
          for (int zero : k.zeros)
            for (bool sp : k.sps)
              for (Recompute rc : rcs)
                for (int b : k.micro_batches)
                  for (const auto& [sname, v] : k.schedules)
                    for (Precision prec : precs) {
                      const int m = int(r.batch / (int64_t(dp) * b));
                      if (r.microbatches && m != *r.microbatches) continue;
                      if (software_refuses(r, pp, sname, v, m)) continue;
                      visit({dp, tp, pp, v, ep, zero, sp, rc, b, sname, prec, cp, cp_comm});
                    }
      }
}

std::vector<Layout> enumerate_layouts(const PlanRequest& r) {
  WorkBudget budget(str(r.devices, " devices"));
  std::vector<Layout> out;
  for_each_layout(r, budget, [&](const Layout& l) { out.push_back(l); });
  return out;
}

namespace {

// Work units (work_budget.h, about 3 ns each here) of the pieces of a candidate, measured:
// train's validation (a fixed part, and the stage-layer list it parses), the default
// partition of the chunks, building the schedule, the memory estimate (its blocks and its
// per-stage pass over the schedule), the time model (its blocks) and the simulation.
double validation_work(double chunks) {
  return 64 + 16 * chunks;
}
// partition_layers sorts chunks x (layers + 1) candidate bottlenecks, then scans them.
double partition_work(const PlanRequest& r, double chunks) {
  return 64 * chunks * (double(r.model.layers) + chunks + 1);
}
// The local experts of the candidate's MoE blocks: the local time model costs each (the
// GPU one streams them as one; the memory estimate's loop over them compiles to a product,
// measured: 5e6 experts a rank estimate in well under a millisecond).
double expert_blocks(const PlanRequest& r, const Layout& l) {
  return r.model.experts > 0 ? double(r.model.layers) * r.model.experts / l.ep : 0.0;
}
double actions(const Layout& l, int microbatches) {
  return l.pp > 1 ? double(l.pp) * l.virtual_stages * microbatches : 1.0;
}
double estimate_work(const PlanRequest& r, const Layout& l, int microbatches) {
  return 32.0 * r.model.layers + 4.0 * l.pp * l.pp * l.virtual_stages +
         8 * actions(l, microbatches);
}
// Oversubscribed local layouts are costed twice (time_model.h).
double time_work(const PlanRequest& r, const Layout& l) {
  return 2 * (150.0 * r.model.layers + (r.hardware.local ? 32 * expert_blocks(r, l) : 0.0));
}

// The search over the layouts for_each_layout visits: each is validated, its memory
// planned and, when it fits and can still enter the best `keep`, its step time predicted.
class Search {
 public:
  Search(const PlanRequest& r, size_t keep)
      : r_(r),
        keep_(keep),
        budget_(str(r.devices, r.hardware.local ? " ranks, " : " GPUs, ", r.model.layers,
                    " layers, batch ", r.batch)) {}

  void consider(const Layout& l) {
    ++out_.considered;
    // train_options spells the default partition out (memoised per (pp, v)) when it exists.
    const double chunks = double(l.pp) * l.virtual_stages;
    const bool partitioned = l.pp > 1 && chunks <= r_.model.layers;
    budget_.charge(validation_work(partitioned ? chunks : 0));
    if (partitioned && partitions_.insert({l.pp, l.virtual_stages}).second)
      budget_.charge(partition_work(r_, chunks));
    try {
      validate_candidate(r_, l);
    } catch (const UsageError& e) {
      if (first_error_.empty()) first_error_ = e.what();
      return;
    }
    ++out_.valid;
    any_valid_ = true;
    Candidate c;
    c.layout = l;
    const int m = microbatches(r_, l);
    const ScheduleKey key{l.schedule, l.pp, m, l.virtual_stages};
    // A layout that cannot fit by its lower bound is given no work costing more than a
    // hundredth of the budget (a schedule of billions of actions, an estimate over billions
    // of experts): its lower bound stands for its memory.
    const double work = (cache_.count(key) ? 0 : 16 * actions(l, m)) + estimate_work(r_, l, m);
    if (work > kSearchWorkLimit / 100) {
      c.memory = lower_bound_memory(memory_lower_bound(r_, l));
      if (c.memory.total() > usable_bytes_per_rank(r_)) return not_fitting(std::move(c));
    }
    const Schedule& s = schedule(l);
    budget_.charge(estimate_work(r_, l, m));
    c.memory = planned_memory(r_, l, s);
    c.fits = !c.memory.lower_bound && c.memory.total() <= usable_bytes_per_rank(r_);
    if (c.memory.lower_bound && c.memory.total() <= usable_bytes_per_rank(r_)) ++out_.uncounted;
    if (!c.fits) return not_fitting(std::move(c));
    predict(std::move(c), s);
  }

  SearchResult finish();
  WorkBudget& budget() { return budget_; }

 private:
  void not_fitting(Candidate c) {
    if (!smallest_ || c.memory.total() < smallest_->memory.total()) smallest_ = std::move(c);
  }

  const Schedule& schedule(const Layout& l) {
    const int m = microbatches(r_, l);
    const ScheduleKey key{l.schedule, l.pp, m, l.virtual_stages};
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    budget_.charge(16 * actions(l, m));
    Schedule s;
    if (l.pp > 1) s = make_schedule(l.schedule, l.pp, m, l.virtual_stages);
    return cache_.emplace(key, std::move(s)).first->second;
  }

  void predict(Candidate c, const Schedule& s) {
    ++out_.fit;
    budget_.charge(time_work(r_, c.layout));
    const double limit = best_.size() < keep_ ? 1e300 : *std::prev(best_.end());
    c.time = predict_time(r_, c.layout, s, limit);
    // The simulation (~850 ns per stage and microbatch here; locally also the shared-cores
    // replay), charged after it ran: at most one runs past the limit.
    if (!c.time.pruned)
      budget_.charge((r_.hardware.local ? 2 : 1) * 256 *
                     actions(c.layout, microbatches(r_, c.layout)));
    if (c.time.pruned) {
      ++out_.pruned;
      return;
    }
    best_.insert(c.time.step_s);
    if (best_.size() > keep_) best_.erase(std::prev(best_.end()));
    fill_rates(r_, c);
    out_.candidates.push_back(std::move(c));
  }

  const PlanRequest& r_;
  size_t keep_;
  WorkBudget budget_;
  SearchResult out_;
  std::map<ScheduleKey, Schedule> cache_;
  std::set<std::pair<int, int>> partitions_;  // (pp, v) whose partition was charged
  std::string first_error_;
  std::optional<Candidate> smallest_;  // of those that do not fit
  bool any_valid_ = false;
  std::multiset<double> best_;  // the keep shortest step times so far
};

// The refusal when nothing fits: the smallest footprint, against what a device offers.
std::string nothing_fits(const PlanRequest& r, const Candidate& smallest, int uncounted) {
  const double gib = 1024.0 * 1024 * 1024;
  char buf[64], cap[64];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(smallest.memory.total()) / gib);
  std::snprintf(cap, sizeof cap, "%.2f GiB", double(usable_bytes_per_rank(r)) / gib);
  const Layout& l = smallest.layout;
  return str(
      "no layout fits in memory: the smallest footprint is ",
      smallest.memory.lower_bound ? "at least " : "", buf, " per device (dp ", l.dp,
      l.cp > 1 ? str(" cp ", l.cp) : std::string(), " tp ", l.tp, " pp ", l.pp, " zero ", l.zero,
      " recompute ", recompute_name(l.recompute), " micro-batch ", l.micro_batch, ") against ", cap,
      " usable",
      uncounted > 0 ? str(" (", uncounted, " layouts too large to count exactly)") : std::string(),
      "; ", remedy(r, smallest));
}

SearchResult Search::finish() {
  if (!any_valid_) {
    MT_REQUIRE(!first_error_.empty(), "no layout of ", r_.devices,
               " devices has the fixed knobs (--dp x --tp x --pp must be the device count)");
    throw UsageError(first_error_);
  }
  if (out_.candidates.empty()) throw UsageError(nothing_fits(r_, *smallest_, out_.uncounted));
  std::stable_sort(out_.candidates.begin(), out_.candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
                     return a.memory.total() < b.memory.total();
                   });
  if (out_.candidates.size() > keep_) out_.candidates.resize(keep_);
  out_.work = budget_.used();
  return std::move(out_);
}

}  // namespace

SearchResult search_layouts(const PlanRequest& r, size_t keep) {
  validate_request(r);
  Search search(r, keep);
  for_each_layout(r, search.budget(), [&](const Layout& l) { search.consider(l); });
  return search.finish();
}

}  // namespace mt::plan
