#include "plan/search.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "plan/model_flops.h"

namespace mt::plan {

namespace {

std::vector<int> divisors(int n, int limit) {
  std::vector<int> d;
  for (int i = 1; i <= n && i <= limit; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

template <typename T>
std::vector<T> choices(const std::optional<T>& fixed, std::vector<T> all) {
  if (fixed) return {*fixed};
  return all;
}

using ScheduleKey = std::tuple<std::string, int, int, int>;

const Schedule& cached_schedule(std::map<ScheduleKey, Schedule>& cache, const Layout& l,
                                int microbatches) {
  const ScheduleKey key{l.schedule, l.pp, microbatches, l.virtual_stages};
  auto it = cache.find(key);
  if (it == cache.end()) {
    Schedule s;
    if (l.pp > 1) s = make_schedule(l.schedule, l.pp, microbatches, l.virtual_stages);
    it = cache.emplace(key, std::move(s)).first;
  }
  return it->second;
}

void fill_rates(const PlanRequest& r, Candidate& c) {
  const double flops = model_flops_per_step(r.model, r.batch);
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
    tip(l.recompute != "full" && r.model.experts == 0, r.recompute.has_value(), "--recompute full");
    tip(l.micro_batch > 1, r.micro_batch.has_value(), "a smaller --micro-batch");
    tip(l.tp > 1 && !l.sequence_parallel, r.sequence_parallel.has_value(), "--sequence-parallel");
    tip(true, r.tp.has_value() || r.pp.has_value(), "larger --tp or --pp");
    tip(true, false, "a smaller --batch or --seq");
  }
  std::string list;
  for (size_t i = 0; i < tips.size(); ++i)
    list += (i == 0 ? "" : i + 1 == tips.size() ? ", or " : ", ") + tips[i];
  return what + ": try " + list;
}

}  // namespace

// Every combination of the knobs left open (the fixed ones as given), in a fixed order.
// Divisibility beyond dp x tp x pp = devices is left to validate_candidate, so that the
// rules stay train's.
std::vector<Layout> enumerate_layouts(const PlanRequest& r) {
  const ModelConfig& m = r.model;
  const int n = r.devices;
  for (auto [name, v] : {std::pair{"--tp", r.tp}, {"--pp", r.pp}, {"--dp", r.dp}})
    MT_REQUIRE(!v || n % *v == 0, name, " ", *v, " does not divide ",
               r.hardware.local ? "--ranks " : "--gpus ", n);
  std::vector<std::string> precisions = {"fp32"};
  if (!r.hardware.local && r.hardware.peak_bf16 > 0) precisions.push_back("bf16");
  std::vector<std::string> recomputes = {"none", "selective"};
  if (m.experts == 0) recomputes.push_back("full");
  std::vector<Layout> out;
  for (int tp : choices(r.tp, divisors(n, n)))
    for (int pp : choices(r.pp, divisors(n / tp, std::max(m.layers, 1)))) {
      if ((n / tp) % pp != 0) continue;
      const int dp = n / (tp * pp);
      if (r.dp && *r.dp != dp) continue;
      // (schedule, virtual stages): without pp the schedule is not used.
      std::vector<std::pair<std::string, int>> schedules = {{"1f1b", 1}};
      if (pp > 1) {
        schedules = {{"1f1b", 1}, {"gpipe", 1}, {"zb-h1", 1}};
        for (int v : {2, 3, 4, 6, 8})
          if (pp * v <= m.layers) schedules.push_back({"interleaved", v});
      }
      // Only the schedules the software profile has (Megatron-LM 2021/2022: no zb-h1).
      if (!r.hardware.local && !r.hardware.schedules.empty())
        std::erase_if(schedules, [&](const auto& sv) {
          return std::find(r.hardware.schedules.begin(), r.hardware.schedules.end(), sv.first) ==
                 r.hardware.schedules.end();
        });
      if (r.schedule || r.virtual_stages) {
        std::erase_if(schedules, [&](const auto& sv) {
          return (r.schedule && *r.schedule != sv.first) ||
                 (r.virtual_stages && *r.virtual_stages != sv.second);
        });
        // A fixed pair outside the list is still tried: validation says what is wrong.
        if (schedules.empty())
          schedules.push_back({r.schedule.value_or("1f1b"), r.virtual_stages.value_or(1)});
      }
      const std::vector<int> mbs = divisors(r.batch % dp == 0 ? r.batch / dp : 1, 64);
      std::vector<int> eps = {1};
      if (m.experts > 0) {
        eps.clear();
        for (int e : divisors(dp, dp))
          if (m.experts % e == 0) eps.push_back(e);
      }
      std::vector<int> zeros = dp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0};
      if (!r.hardware.local)  // the software's ZeRO stages (Megatron-LM 2021/2022: none)
        std::erase_if(zeros, [&](int z) { return z > r.hardware.max_zero; });
      const std::vector<bool> sps =
          tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false};
      for (int ep : choices(r.ep, eps))
        for (int zero : choices(r.zero, zeros))
          for (bool sp : choices(r.sequence_parallel, sps))
            for (const std::string& rc : choices(r.recompute, recomputes))
              for (int b : choices(r.micro_batch, mbs))
                for (const auto& [sname, v] : schedules)
                  for (const std::string& prec : choices(r.precision, precisions)) {
                    if (r.microbatches && r.batch / (dp * b) != *r.microbatches) continue;
                    // Megatron-LM's interleaved schedule: equal chunks (layers divisible
                    // by pp x v) and microbatches divisible by pp (its own assertions).
                    if (!r.hardware.local && r.hardware.even_chunks && sname == "interleaved" &&
                        (m.layers % (pp * v) != 0 || (r.batch / (dp * b)) % pp != 0))
                      continue;
                    out.push_back({dp, tp, pp, v, ep, zero, sp, rc, b, sname, prec});
                  }
    }
  return out;
}

SearchResult search_layouts(const PlanRequest& r, size_t keep) {
  SearchResult out;
  std::map<ScheduleKey, Schedule> cache;
  std::string first_error;
  Candidate smallest;
  bool any_valid = false;
  std::multiset<double> best;  // the keep shortest step times so far
  for (const Layout& l : enumerate_layouts(r)) {
    ++out.considered;
    try {
      validate_candidate(r, l);
    } catch (const UsageError& e) {
      if (first_error.empty()) first_error = e.what();
      continue;
    }
    ++out.valid;
    const Schedule& s = cached_schedule(cache, l, r.batch / (l.dp * l.micro_batch));
    Candidate c;
    c.layout = l;
    c.memory = planned_memory(r, l, s);
    c.fits = c.memory.total() <= usable_bytes_per_rank(r);
    if (!any_valid || c.memory.total() < smallest.memory.total()) smallest = c;
    any_valid = true;
    if (!c.fits) continue;
    ++out.fit;
    const double limit = best.size() < keep ? 1e300 : *std::prev(best.end());
    c.time = predict_time(r, l, s, limit);
    if (c.time.pruned) {
      ++out.pruned;
      continue;
    }
    best.insert(c.time.step_s);
    if (best.size() > keep) best.erase(std::prev(best.end()));
    fill_rates(r, c);
    out.candidates.push_back(std::move(c));
  }
  if (!any_valid) {
    MT_REQUIRE(!first_error.empty(), "no layout of ", r.devices,
               " devices has the fixed knobs (--dp x --tp x --pp must be the device count)");
    throw UsageError(first_error);
  }
  if (out.candidates.empty()) {
    const double gib = 1024.0 * 1024 * 1024;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(smallest.memory.total()) / gib);
    char cap[64];
    std::snprintf(cap, sizeof cap, "%.2f GiB", double(usable_bytes_per_rank(r)) / gib);
    throw UsageError(str("no layout fits in memory: the smallest footprint is ", buf,
                         " per device (dp ", smallest.layout.dp, " tp ", smallest.layout.tp, " pp ",
                         smallest.layout.pp, " zero ", smallest.layout.zero, " recompute ",
                         smallest.layout.recompute, " micro-batch ", smallest.layout.micro_batch,
                         ") against ", cap, " usable; ", remedy(r, smallest)));
  }
  std::stable_sort(out.candidates.begin(), out.candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
                     return a.memory.total() < b.memory.total();
                   });
  if (out.candidates.size() > keep) out.candidates.resize(keep);
  return out;
}

}  // namespace mt::plan
