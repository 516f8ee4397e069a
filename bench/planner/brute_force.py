"""The closed loop's 4-rank brute force (closed_loop.py --brute-force): every valid layout
measured once, the planner's first choice placed among them, then the finalists re-measured
in brackets (finalist_brackets.py)."""
import json
import math
import os
import shutil
import statistics
import subprocess

import finalist_brackets as fb
import loop_layouts as layouts
from loop_measure import loadavg, measure


def layout_knobs(lay, arch="gpt2"):
    k = dict(dp=lay["dp"], tp=lay["tp"], pp=lay["pp"], mb=lay["micro_batch"],
             zero=lay["zero"], recompute=lay["recompute"], sp=lay["sequence_parallel"],
             schedule=lay["schedule"], v=lay["virtual_stages"], ep=lay["ep"],
             precision=lay["precision"], cp=lay.get("cp", 1), cp_comm=lay.get("cp_comm", "ring"),
             arch=arch)
    return k


def brute_candidates(binary, profile, arch):
    """Every valid 4-rank layout (ZeRO 0, no recomputation, to keep the count small), sorted
    by the planner's prediction. With --brute-arch llama (the default) the Llama block, so
    that cp 2 and 4 (ring and all-gather) are layouts too: the local search keeps cp at 1
    unless it is fixed, so each cp is planned on its own and the lists merged; DualPipe-V is
    among the schedules wherever m >= 2 pp."""
    llama = ["--arch", "llama", "--kv-heads", str(int(layouts.MODEL[layouts.MODEL.index("--heads") + 1]) // 2),
             "--tie-embeddings=false"] if arch == "llama" else []
    fixes = [[]]
    if arch == "llama":
        fixes = [["--cp", "1"]] + [["--cp", str(cp), "--cp-comm", comm]
                                   for cp in (2, 4) for comm in ("ring", "allgather")]
    cands = []
    for fix in fixes:
        p = subprocess.run([binary, "plan", "--hardware", "local", "--profile", profile,
                            "--ranks", "4", "--zero", "0", "--recompute", "none", "--json",
                            "--top", "100000"] + layouts.MODEL + llama + fix,
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"(no layout with {' '.join(fix)}: {p.stderr.strip()})")
            continue
        cands += json.loads(p.stdout)["candidates"]
    cands.sort(key=lambda c: c["predicted"]["step_time_s"])
    return cands


def realtime_prefix():
    """The command that runs a measured step under SCHED_FIFO (--realtime): its rank threads
    then preempt every other program and are spread over the cores by the real-time
    scheduler, so a loaded host measures about what a quiet one would with ideal placement
    (stop 44: the finalists' walls 57-70 ms under load 10-15, against 300-370 ms at normal
    priority and at nice -20, where each waiter's yields hand its core to other programs for
    a time slice). A diagnostic, not the goal's measurement: users' steps run under the
    normal scheduler, whose placement of 4 rank threads on 2 cores is part of what they pay."""
    if not shutil.which("chrt"):
        raise SystemExit("brute_force: --realtime needs chrt (util-linux)")
    probe = subprocess.run(["chrt", "-f", "10", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        raise SystemExit(f"brute_force: --realtime: chrt -f 10 failed here: {probe.stderr.strip()}")
    # The poll that reads each run's CPU seconds at its step boundaries (loop_measure.measure)
    # must see them on time: at normal priority, or below the ranks', it starves while the
    # ranks run (under load it read 1.3-1.7 ms of CPU for 55 ms steps: both boundaries in
    # one late poll). Above them it takes a core for one stat every 5 ms.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
    except (AttributeError, OSError) as e:
        print(f"brute_force: --realtime: the poll stays at normal priority ({e})")
    return ["chrt", "-f", "10"]


def brute_force(binary, out, profile, steps, arch="llama", limit=None, realtime=False):
    """Every layout of a 4-rank world measured; where does the planner's first choice land?
    --limit N measures only the planner's first N (a quick check that the harness runs)."""
    prefix = realtime_prefix() if realtime else []
    cands = brute_candidates(binary, profile, arch)
    if limit:
        cands = cands[:limit]
    load0 = loadavg()
    results = []
    for i, c in enumerate(cands):
        k = layout_knobs(c["layout"], arch)
        wall, cpu = measure(binary, out, 4, k, steps, prefix=prefix)
        # the planner's waits per rank and step that sleep (rank_waits.h), beside the
        # finalists' measured sleeps
        results.append((i, c["predicted"]["step_time_s"], wall, cpu, k,
                        c["predicted"].get("blocking_waits_per_rank", 0.0)))
        print(f"#{i + 1:3d} {k}  predicted {c['predicted']['step_time_s'] * 1e3:7.1f} ms  wall "
              f"{wall * 1e3:7.1f}  cpu-est {cpu * 1e3:7.1f}", flush=True)
    load1 = loadavg()
    for label, idx in (("wall", 2), ("cpu-time estimate", 3)):
        # A run whose steps the poll did not see has no CPU figure (nan, or 0 where it read
        # one boundary twice): left out of the CPU ranking rather than ranked first.
        seen = [r for r in results if r[idx] > 0]
        first = results[0]
        if first not in seen:
            print(f"{label}: planner's #1 has no figure")
            continue
        best = min(seen, key=lambda r: r[idx])
        rank = sorted(r[idx] for r in seen).index(first[idx]) + 1
        print(f"{label}: planner's #1 measured {first[idx] * 1e3:.1f} ms (rank {rank} of "
              f"{len(seen)} measured); best measured {best[idx] * 1e3:.1f} ms (planner's "
              f"#{best[0] + 1}); first choice {first[idx] / best[idx] - 1:+.1%} (goal <= 5%)")
    print(f"load average {load0:.2f} -> {load1:.2f} on {os.cpu_count()} cores"
          + ("; every run under SCHED_FIFO (--realtime: a diagnostic)" if realtime else ""))
    remeasure_finalists(binary, out, results, prefix=prefix)


# Steps of each finalist run (its wall: the median of the steps after the first two). Stop
# 43's runs of 10 steps spread by 8-21% over the rounds; the median of 18 steps instead of 8
# leaves less of each run's own step-to-step noise in the rounds (the brute force's single
# passes keep --steps).
FINALIST_STEPS = 20


def finalist_verdict(first, best, goal=0.05):
    """Stops 42-47's rule, kept to read their logs (the finalists now run in brackets:
    finalist_brackets.py): the gap of the two layouts' medians over rotated rounds, taken
    each on its own, 'within' when it is at most the goal, 'beyond' when even the round most
    favourable to the first choice misses it, else 'noise'. Each median can come from a
    different round, so a drift of the host between rounds enters the gap (stop 47: +6.3%
    from rounds whose ratios had a median of +3.2%)."""
    gap = statistics.median(first) / statistics.median(best) - 1
    ratios = sorted(a / b - 1 for a, b in zip(first, best))
    verdict = "within" if gap <= goal else ("beyond" if ratios[0] > goal else "noise")
    return gap, ratios[0], ratios[-1], verdict


def finalist_split(first_walls, first_cpus, best_walls, best_cpus):
    """The first choice's gap over the best finalist in two parts, from the medians of their
    rounds: work (the cpu-time estimate: every rank thread's CPU seconds per step over the
    cores the ranks can use, what they computed) as a ratio, and idle (wall less work: cores
    left idle by waits, a pipeline's fill and drain, or two ranks stacked on one core while
    the other idles) as a difference in seconds. A gap in work is the planner's compute
    pricing; a gap in idle is its waits, bubble and placement. (nan, nan) without CPU
    figures (the run ended before the poll saw its steps)."""
    def med(xs):
        xs = [x for x in xs if not math.isnan(x)]
        return statistics.median(xs) if xs else float("nan")
    fw, fc, bw, bc = med(first_walls), med(first_cpus), med(best_walls), med(best_cpus)
    if math.isnan(fc) or math.isnan(bc):
        return float("nan"), float("nan")
    return fc / bc - 1, (fw - fc) - (bw - bc)


def remeasure_finalists(binary, out, results, finalists=5, steps=FINALIST_STEPS, prefix=(),
                        brackets=fb.BRACKETS, max_brackets=fb.MAX_BRACKETS):
    """The best of 138 single noisy runs is biased low (a lucky run wins; stop 43: one layout
    under three schedule names, the same work, measured 81-102 ms). So the planner's first
    choice and the `finalists` best measured layouts are run again, `steps` steps a run, in
    brackets (finalist_brackets.py: each layout once forward and once in reverse, the first
    choice's mean over each finalist's mean per bracket, the median of those ratios, and
    more brackets, bounded, while the middle of the best finalist's ratios straddles the
    goal). Printed per finalist: its runs, their median, its median ratio, its work and idle
    (finalist_split), and its rank threads' sleeps per step (loop_measure.rank_sleeps) and
    rank 0's tp wait (stop 44, --realtime at load 10-14: tp2 pp2 m1 10-14 sleeps per rank
    and step, dp2 pp2 m1 3-6, tp4 m1 23)."""
    best = sorted(results, key=lambda r: r[2])[:finalists]
    chosen = [results[0]] + [r for r in best if r[0] != 0]
    by_id = {r[0]: r for r in chosen}
    if len(chosen) < 2:  # --limit 1: nothing to compare the first choice with
        print("re-measured: no finalist beside the planner's #1")
        return
    walls = {r[0]: [] for r in chosen}
    cpus = {r[0]: [] for r in chosen}
    details = {r[0]: [] for r in chosen}

    def measure_one(i):
        detail = {}
        wall, cpu = measure(binary, out, 4, by_id[i][4], steps, prefix=prefix, detail=detail)
        walls[i].append(wall)
        cpus[i].append(cpu)
        details[i].append(detail)
        return wall

    load0 = loadavg()
    done, (top, gap, lo, hi, verdict) = fb.settle(measure_one, list(by_id), 0, brackets,
                                                  max_brackets, log=lambda s: print(s, flush=True))
    load1 = loadavg()
    ratios = fb.bracket_ratios(done, 0)
    medians = {i: statistics.median(w) for i, w in walls.items()}

    def med(xs):
        xs = [x for x in xs if not math.isnan(x)]
        return statistics.median(xs) if xs else float("nan")
    for r in chosen:
        w = walls[r[0]]
        work_s = med(cpus[r[0]])
        sleeps = med(d.get("sleeps", float("nan")) for d in details[r[0]])
        tp_wait = med(d.get("tp_wait_s", float("nan")) for d in details[r[0]])
        against = (f"  first choice over it {statistics.median(ratios[r[0]]) - 1:+.1%} "
                   f"(brackets {' '.join(f'{q - 1:+.1%}' for q in ratios[r[0]])})"
                   if r[0] in ratios else "")
        print(f"finalist planner's #{r[0] + 1:<3d} {r[4]}  predicted {r[1] * 1e3:7.1f} ms  "
              f"wall {' '.join(f'{x * 1e3:.1f}' for x in w)}  median "
              f"{medians[r[0]] * 1e3:.1f}  spread {(max(w) - min(w)) / medians[r[0]]:.0%}  "
              f"work {work_s * 1e3:.1f}  idle {(medians[r[0]] - work_s) * 1e3:.1f}  sleeps "
              f"{sleeps:.0f} per rank and step  tp wait {tp_wait * 1e3:.1f} ms (rank 0)  "
              f"predicted waits {r[5] if len(r) > 5 else float('nan'):.1f}{against}",
              flush=True)
    for k, q in enumerate(ratios[top]):
        # other programs' share of the cores in the bracket's runs: a bracket that disagrees
        # with the others next to a high share was another program's, not the layouts'
        others = [d.get("others", float("nan")) for ds in details.values()
                  for d in ds[2 * k:2 * k + 2]]
        others = [o for o in others if not math.isnan(o)]
        print(f"bracket {k + 1}: first choice over planner's #{top + 1} {q - 1:+.1%}; other "
              f"programs took {max(others) if others else float('nan'):.0%} of the cores at "
              f"most in its runs")
    say = {"within": "within the goal",
           "beyond": "beyond the goal",
           "unsettled": f"UNSETTLED after {len(done)} brackets: not a result"}[verdict]
    print(f"re-measured ({len(done)} brackets of {len(chosen)} layouts forward and back, "
          f"{steps} steps a run): best finalist planner's #{top + 1} ({medians[top] * 1e3:.1f} "
          f"ms; planner's #1 {medians[0] * 1e3:.1f} ms); first choice {gap:+.1%} (goal <= 5%; "
          f"the median of the brackets' ratios); middle brackets {lo:+.1%} .. {hi:+.1%}: {say}; "
          f"load average {load0:.2f} -> {load1:.2f}")
    if gap > 0:
        work, idle = finalist_split(walls[0], cpus[0], walls[top], cpus[top])
        print(f"the gap in two: work {work:+.1%} (cpu-time estimate: the compute the planner "
              f"prices), idle {idle * 1e3:+.1f} ms (wall less work: waits, bubble, placement)")
