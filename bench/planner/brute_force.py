"""The closed loop's 4-rank brute force (closed_loop.py --brute-force): every valid layout
measured once, the planner's first choice placed among them, then the finalists re-measured
in interleaved rounds."""
import json
import os
import statistics
import subprocess

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


def brute_force(binary, out, profile, steps, arch="llama", limit=None):
    """Every layout of a 4-rank world measured; where does the planner's first choice land?
    --limit N measures only the planner's first N (a quick check that the harness runs)."""
    cands = brute_candidates(binary, profile, arch)
    if limit:
        cands = cands[:limit]
    load0 = loadavg()
    results = []
    for i, c in enumerate(cands):
        k = layout_knobs(c["layout"], arch)
        wall, cpu = measure(binary, out, 4, k, steps)
        results.append((i, c["predicted"]["step_time_s"], wall, cpu, k))
        print(f"#{i + 1:3d} {k}  predicted {c['predicted']['step_time_s'] * 1e3:7.1f} ms  wall "
              f"{wall * 1e3:7.1f}  cpu-est {cpu * 1e3:7.1f}", flush=True)
    load1 = loadavg()
    for label, idx in (("wall", 2), ("cpu-time estimate", 3)):
        best = min(results, key=lambda r: r[idx])
        first = results[0]
        rank = sorted(r[idx] for r in results).index(first[idx]) + 1
        print(f"{label}: planner's #1 measured {first[idx] * 1e3:.1f} ms (rank {rank} of "
              f"{len(results)} measured); best measured {best[idx] * 1e3:.1f} ms (planner's "
              f"#{best[0] + 1}); first choice {first[idx] / best[idx] - 1:+.1%} (goal <= 5%)")
    print(f"load average {load0:.2f} -> {load1:.2f} on {os.cpu_count()} cores")
    remeasure_finalists(binary, out, results, steps)


# Rounds of the finalists' re-measurement. Stop 42's 3 rounds put the first choice at +12.8%
# while two finalists that do the same work differently (tp2 pp2 m4 under 1f1b and gpipe)
# were 9 ms apart, the gap's size: 5 rounds, in an order rotated each round (no layout
# always follows the same one), give a median that one bad round cannot move.
FINALIST_ROUNDS = 5


def finalist_verdict(first, best, goal=0.05):
    """The first choice against the best finalist from their walls of the same rounds
    (interleaved, so a drift of the host hits both alike): the gap of the medians, and the
    range of the per-round ratios. 'within' when the medians' gap is at most the goal;
    'beyond' when even the round most favourable to the first choice misses the goal; else
    'noise' (the rounds disagree about the goal: the gap is not a result)."""
    gap = statistics.median(first) / statistics.median(best) - 1
    ratios = sorted(a / b - 1 for a, b in zip(first, best))
    verdict = "within" if gap <= goal else ("beyond" if ratios[0] > goal else "noise")
    return gap, ratios[0], ratios[-1], verdict


def remeasure_finalists(binary, out, results, steps, finalists=5, rounds=FINALIST_ROUNDS):
    """The best of 69 single noisy runs is biased low (a lucky run wins; here one layout
    under three schedule names, the same work, measured 81-102 ms). So the planner's first
    choice and the `finalists` best measured layouts are run again, `rounds` times each,
    interleaved and rotated (a drift of the host hits them all alike), with at least 10
    steps, and compared by their medians over the rounds; each finalist's spread
    ((max - min) / median of its rounds) says how far apart two runs of it fall."""
    best = sorted(results, key=lambda r: r[2])[:finalists]
    chosen = [results[0]] + [r for r in best if r[0] != 0]
    walls = {r[0]: [] for r in chosen}
    load0 = loadavg()
    for rnd in range(rounds):
        for r in chosen[rnd % len(chosen):] + chosen[:rnd % len(chosen)]:
            walls[r[0]].append(measure(binary, out, 4, r[4], max(steps, 10))[0])
    load1 = loadavg()
    medians = {i: statistics.median(w) for i, w in walls.items()}
    for r in chosen:
        w = walls[r[0]]
        print(f"finalist planner's #{r[0] + 1:<3d} {r[4]}  predicted {r[1] * 1e3:7.1f} ms  "
              f"wall {' '.join(f'{x * 1e3:.1f}' for x in w)}  median "
              f"{medians[r[0]] * 1e3:.1f}  spread {(max(w) - min(w)) / medians[r[0]]:.0%}",
              flush=True)
    top = min(medians, key=medians.get)
    gap, lo, hi, verdict = finalist_verdict(walls[0], walls[top])
    say = {"within": "within the goal",
           "beyond": "beyond the goal in every round",
           "noise": "rounds disagree about the goal: noise, not a result"}[verdict]
    print(f"re-measured ({rounds} interleaved rounds of {max(steps, 10)} steps): planner's #1 "
          f"{medians[0] * 1e3:.1f} ms, best finalist {medians[top] * 1e3:.1f} ms (planner's "
          f"#{top + 1}); first choice {gap:+.1%} (goal <= 5%); per round {lo:+.1%} .. "
          f"{hi:+.1%}: {say}; load average {load0:.2f} -> {load1:.2f}")
