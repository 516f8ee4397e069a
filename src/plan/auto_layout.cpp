#include "plan/auto_layout.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "plan/calibrate.h"
#include "plan/search.h"

namespace mt::plan {

namespace {

bool is_fixed(const TrainOptions& o, const char* name) {
  const auto& f = o.parallel.fixed;
  return std::find(f.begin(), f.end(), name) != f.end();
}

std::string describe(const Layout& l, int batch) {
  return str("dp ", l.dp, " tp ", l.tp, l.cp > 1 ? str(" cp ", l.cp) : std::string(), " pp ", l.pp,
             l.pp > 1 ? str(" ", l.schedule,
                            l.virtual_stages > 1 ? str(" v", l.virtual_stages) : std::string())
                      : std::string(),
             l.ep > 1 ? str(" ep ", l.ep) : std::string(), " zero ", l.zero,
             l.sequence_parallel ? " sp" : "", " recompute ", recompute_name(l.recompute),
             " microbatches ", batch / l.per_replica(),
             l.precision != Precision::fp32 ? str(" ", precision_name(l.precision)) : "");
}

}  // namespace

std::string apply_auto_layout(TrainOptions& o, const std::string& profile_path) {
  ParallelOptions& p = o.parallel;
  MT_REQUIRE(p.ranks >= 1, "--auto-layout needs --ranks N (the ranks to lay out)");
  PlanRequest r;
  r.model = o.model;
  r.batch = o.optim.batch;
  r.hardware = for_backend(load_local_profile(profile_path), backend_name(o.engine.backend));
  r.backend = backend_name(o.engine.backend);
  r.devices = p.ranks;
  r.threads = o.optim.threads;
  r.bucket_mb = p.bucket_mb;
  if (is_fixed(o, "dp")) r.dp = p.dp;
  if (is_fixed(o, "tp")) r.tp = p.tp;
  if (is_fixed(o, "pp")) r.pp = p.pp;
  if (is_fixed(o, "ep")) r.ep = p.ep;
  // cp is a fixed knob only: locally the search keeps cp 1 (search.cpp, cp_choices), and a
  // cp given in a config file rather than a flag is kept all the same, never dropped.
  if (is_fixed(o, "cp") || p.cp > 1) {
    r.cp = p.cp;
    r.cp_comm = p.cp_comm;
  }
  if (is_fixed(o, "zero")) r.zero = p.zero;
  if (is_fixed(o, "sequence-parallel")) r.sequence_parallel = p.sequence_parallel;
  if (is_fixed(o, "schedule")) r.schedule = schedule_name(p.schedule);
  if (is_fixed(o, "virtual-stages")) r.virtual_stages = p.virtual_stages;
  if (is_fixed(o, "recompute")) r.recompute = o.optim.recompute;
  if (is_fixed(o, "microbatches")) r.microbatches = p.microbatches;
  // Precision changes the numbers a run computes, so it is the user's choice, never
  // searched: the layout is planned for the precision the run will use.
  r.precision = o.optim.precision;
  // So are the MoE exchange's parts (not searched): priced as the run will overlap them.
  r.hardware.a2a_overlap_parts = p.moe_overlap_parts;
  const SearchResult s = search_layouts(r, 2);
  const Candidate& best = s.candidates.front();
  const Layout& l = best.layout;
  p.dp = l.dp;
  p.tp = l.tp;
  p.pp = l.pp;
  p.cp = l.cp;
  p.ep = l.ep;
  p.zero = l.zero;
  p.sequence_parallel = l.sequence_parallel;
  p.schedule = schedule_kind(l.schedule);
  p.virtual_stages = l.virtual_stages;
  p.microbatches = microbatches(r, l);
  o.optim.recompute = l.recompute;
  char line[160];
  std::snprintf(line, sizeof line, " (predicted %.1f ms/step, %.1f MiB per rank",
                best.time.step_s * 1e3, double(best.memory.total()) / (1 << 20));
  std::string why = str("auto-layout: ", describe(l, r.batch), line);
  if (s.candidates.size() > 1) {
    const Candidate& next = s.candidates[1];
    std::snprintf(line, sizeof line, "; %.1f%% faster than the next, ",
                  100 * (next.time.step_s / best.time.step_s - 1));
    why += line + describe(next.layout, r.batch);
  }
  why += str("; ", s.fit, " of ", s.valid, " valid layouts fit; profile ", profile_path, ")");
  return why;
}

}  // namespace mt::plan
