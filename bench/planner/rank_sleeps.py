"""Where a layout's rank threads sleep, and what their placement on the cores costs (stop 47,
issue #30: the brute force's first choice, llama tp2 pp2 zb-h1 sp mb8, sleeps 10-18 times
per rank and step where the schedule names 3.5).

  python3 bench/planner/rank_sleeps.py BINARY attribute [--realtime] [--steps N] [LAYOUT]
  python3 bench/planner/rank_sleeps.py BINARY placement [--rounds N] [--steps N] [LAYOUT]

LAYOUT is `first` (the planner's #1 of stops 42-46, the default), `best` (stop 46's best
finalist, dp2 pp2 gpipe mb2) or `-- FLAGS` (train's layout flags; the loop's model is added).

attribute: one run under `perf record -a -e sched:sched_switch` (clock CLOCK_MONOTONIC, the
trace's steady clock) with --trace. Each switch-out of an `mt rank N` thread in state S or D
is a sleep; it is placed in the trace phase its rank was in (F, B, W: a collective of the
stage's own ranks, i.e. tp/cp/SP; RECV_*: the pipeline's receive; optimizer, wait grad
buckets; between: outside every phase) and split by what the other ranks did at that moment:
the stage's other ranks computing or not, another stage computing or idle. A sleep in F/B/W
with the stage-mate computing and the other stage idle is a partner late while its stage
computes alone (no other rank wanted the core); with the other stage computing it is the
co-run (4 threads on 2 cores). Then, over the stretches where one stage computes alone, what
its two rank threads did: both running (a core each), one running while its partner waits for
the same cpu (stacked), one running while its partner sleeps in a collective, neither
running (other programs hold the cores). Needs perf and system-wide tracepoints (root, or
kernel.perf_event_paranoid <= -1). `--realtime` runs the ranks under SCHED_FIFO (chrt -f 10):
other programs cannot take their cores, a loaded host's diagnostic.

placement: the layout alternated unbound (`train --bind none`; `--bind auto` left 4
one-thread ranks on 2 cores unbound until stop 47, which made it bind them as `split` does),
`split` (rank r pinned to core r mod cores: a tp pair, consecutive ranks, on two
cores) and `stacked` (rank r to core r * cores / ranks: a stage's pair on one core), each
pinned from outside with sched_setaffinity once the rank threads exist; the median step
after 3 and the ratios to unbound in the same round.
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import loop_layouts as lay
from loop_measure import loadavg

LLAMA = ["--arch", "llama", "--kv-heads", "4", "--tie-embeddings=false"]
PRESETS = {
    "first": LLAMA + ["--dp", "1", "--tp", "2", "--pp", "2", "--microbatches", "1",
                      "--schedule", "zb-h1", "--sequence-parallel"],
    "best": LLAMA + ["--dp", "2", "--tp", "1", "--pp", "2", "--microbatches", "2",
                     "--schedule", "gpipe"],
}
SWITCH = re.compile(r"\s*(\d+)\s+(?:\[(\d+)\]\s+)?([\d.]+): prev_comm=(.*?) prev_pid=(\d+) "
                    r"prev_prio=\d+ prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")
PHASE = re.compile(r"^(\d+)(\D+?)\d*$")  # "1W0": stage 1's W of microbatch 0


def read_trace(trace, skip):
    """({rank: [(begin_s, end_s, phase, cat)]}, {rank: stage}, window (lo, hi), steps): the
    trace's phases on the steady clock, after `skip` warm-up steps."""
    with open(trace) as f:
        ev = json.load(f)["traceEvents"]
    t0 = next(e for e in ev if e.get("name") == "clock_origin")["args"]["steady_s"]
    spans = [e for e in ev if e.get("ph") == "X"]
    steps = sorted((e for e in spans if e.get("cat") == "step" and e["tid"] == 0),
                   key=lambda e: e["ts"])
    lo = t0 + steps[skip]["ts"] * 1e-6
    hi = t0 + (steps[-1]["ts"] + steps[-1]["dur"]) * 1e-6
    phases, stage = collections.defaultdict(list), {}
    for e in spans:
        if e.get("cat") == "step":
            continue
        m = PHASE.match(e["name"])
        name = m.group(2) if m else e["name"]
        if m and e.get("cat") == "compute":
            stage[e["tid"]] = int(m.group(1))
        b = t0 + e["ts"] * 1e-6
        phases[e["tid"]].append((b, b + e["dur"] * 1e-6, name, e.get("cat", "")))
    return phases, stage, (lo, hi), len(steps) - skip


def phase_at(spans, t):
    for b, e, name, cat in spans:
        if b <= t < e:
            return name, cat
    return "between", ""


def read_switches(lines):
    """[(time, prev tid, prev state, next tid, cpu)] and {tid: rank} of `perf script -F
    [cpu,]tid,time,trace` lines of sched:sched_switch (cpu -1 where not printed)."""
    switches, last_comm = [], {}
    for line in lines:
        m = SWITCH.match(line)
        if not m:
            continue
        last_comm[int(m.group(5))] = m.group(4)
        last_comm[int(m.group(8))] = m.group(7)
        switches.append((float(m.group(3)), int(m.group(5)), m.group(6), int(m.group(8)),
                         int(m.group(2)) if m.group(2) else -1))
    # A thread is named by its last name: rank threads start under the process's name, a
    # rank's progress threads under the rank's and rename themselves "mt progress".
    ranks = {t: re.match(r"mt rank (\d+)", c) for t, c in last_comm.items()}
    return switches, {t: int(m.group(1)) for t, m in ranks.items() if m}


def sleep_kind(phases, stage, rank, t):
    """The row a sleep of `rank` at `t` counts in: (phase, what the others were doing)."""
    name, cat = phase_at(phases[rank], t)
    others = [o for o in phases if o != rank]
    computing = lambda o: phase_at(phases[o], t)[1] == "compute"  # noqa: E731
    mate = any(computing(o) for o in others if stage.get(o) == stage.get(rank))
    other = any(computing(o) for o in others if stage.get(o) != stage.get(rank))
    where = "other stage computing" if other else "other stage idle"
    if cat == "compute":
        return (f"{name} (stage collective)",
                ("stage-mate computing, " if mate else "stage-mate not computing, ") + where)
    return name, where


def attribute(phases, stage, window, switches, rank_of):
    """{row: [sleeps, seconds asleep, [each sleep's seconds]]} over the window: a sleep
    lasts from the rank's switch-out to its next switch-in."""
    rows = collections.defaultdict(lambda: [0, 0.0, []])
    asleep = {}
    for t, prev, state, nxt, _ in switches:
        if nxt in asleep:
            since, row = asleep.pop(nxt)
            rows[row][1] += t - since
            rows[row][2].append(t - since)
        if prev in rank_of and state[:1] in ("S", "D") and window[0] <= t <= window[1]:
            row = sleep_kind(phases, stage, rank_of[prev], t)
            rows[row][0] += 1
            asleep[prev] = (t, row)
    return rows


def lone_stage(phases, stage, t):
    """The one stage computing at t (any of its ranks in a compute phase), else None."""
    busy = {stage[r] for r in phases if r in stage and phase_at(phases[r], t)[1] == "compute"}
    return busy.pop() if len(busy) == 1 else None


def pair_state(a, b):
    """What a 2-rank stage's threads do, from each one's (state, cpu): state "run" (on the
    cpu), "R" (preempted there, waiting to run) or "S" (asleep)."""
    running = [x for x in (a, b) if x[0] == "run"]
    if len(running) == 2:
        return "both running"
    if len(running) == 1:
        other = a if a[0] != "run" else b
        if other[0] == "S":
            return "one running, its partner asleep (a collective's wait)"
        return ("one running, its partner waiting on the same cpu (stacked)"
                if other[1] == running[0][1] else "one running, its partner preempted on the other cpu")
    return "neither running (" + " ".join(sorted(x[0] for x in (a, b))) + ")"


def lone_stage_occupancy(phases, stage, window, switches, rank_of):
    """{what the computing stage's two rank threads do: seconds} over the window's stretches
    where one stage computes alone (the other's ranks wait in a receive): with a core each
    both run; stacked, one runs while its partner waits for the same cpu. Needs the
    switches' cpus; stages of 2 ranks."""
    state = {r: ("S", -1) for r in rank_of.values()}
    spent = collections.Counter()
    before = None
    for t, prev, st, nxt, cpu in switches:
        if before is not None and window[0] <= before and t <= window[1]:
            s = lone_stage(phases, stage, (t + before) / 2)
            pair = [r for r in sorted(phases) if stage.get(r) == s]
            if s is not None and len(pair) == 2 and all(r in state for r in pair):
                spent[pair_state(state[pair[0]], state[pair[1]])] += t - before
        before = t
        if prev in rank_of:
            state[rank_of[prev]] = ("R" if st.startswith("R") else "S", cpu)
        if nxt in rank_of:
            state[rank_of[nxt]] = ("run", cpu)
    return spent


def report_occupancy(spent, steps):
    total = sum(spent.values())
    if not total:
        return
    print(f"a stage computing alone: {total / steps * 1e3:.1f} ms per step, its two rank threads:")
    for what, secs in spent.most_common():
        print(f"  {secs / total * 100:5.1f}%  {secs / steps * 1e3:6.2f} ms per step  {what}")


def report_rows(rows, ranks, steps):
    total = sum(v[0] for v in rows.values())
    print(f"sleeps per rank and step {total / ranks / steps:.1f}")
    for row, (n, secs, each) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        med = statistics.median(each) * 1e3 if each else float("nan")
        print(f"  {n / ranks / steps:5.2f} per rank and step, asleep {secs / ranks / steps * 1e3:6.2f} "
              f"ms (median {med:.2f} ms)  {row[0]:28s} {row[1]}")


def train_cmd(binary, layout, steps, out, trace=None):
    cmd = [binary, "train", "--steps", str(steps), "--quiet", "--metrics", out,
           "--lr-schedule", "constant", "--peak-gflops", "100"] + lay.MODEL + layout
    return cmd + (["--trace", trace] if trace else [])


def median_step_ms(metrics, skip=3):
    with open(metrics) as f:
        steps = [json.loads(l)["step_time_s"] for l in f if '"step_time_s"' in l][skip:]
    return statistics.median(steps) * 1e3


def run_attribute(binary, layout, steps, realtime, tmp):
    data, trace, metrics = (os.path.join(tmp, n) for n in ("s.data", "t.json", "m.jsonl"))
    prefix = ["chrt", "-f", "10"] if realtime else []
    # -a: a switch is recorded in the context of the task leaving the cpu, so a per-task
    # record misses every switch-in from another program or the idle task (17% of the
    # ranks' switch-ins at load 10, 3-4% under SCHED_FIFO; 0.2-0.6% system-wide).
    subprocess.run(["perf", "record", "-q", "-a", "-k", "CLOCK_MONOTONIC", "-e", "sched:sched_switch",
                    "-o", data, "--"] + prefix + train_cmd(binary, layout, steps, metrics, trace),
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    script = subprocess.run(["perf", "script", "-i", data, "-F", "cpu,tid,time,trace"],
                            check=True, capture_output=True, text=True).stdout
    phases, stage, window, n = read_trace(trace, 2)
    switches, rank_of = read_switches(script.splitlines())
    print(f"step median {median_step_ms(metrics):.1f} ms over steps 4-{steps}; sleeps over "
          f"steps 3-{steps}{' (SCHED_FIFO)' if realtime else ''}:")
    report_rows(attribute(phases, stage, window, switches, rank_of), len(phases), n)
    report_occupancy(lone_stage_occupancy(phases, stage, window, switches, rank_of), n)


def rank_threads(pid, ranks, timeout=10.0):
    """{rank: tid} of the process's `mt rank N` threads once all `ranks` exist."""
    end = time.time() + timeout
    while time.time() < end:
        found = {}
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    m = re.match(r"mt rank (\d+)", f.read())
            except OSError:
                continue
            if m:
                found[int(m.group(1))] = int(tid)
        if len(found) >= ranks:
            return found
        time.sleep(0.005)
    return {}


def placed_run(binary, layout, steps, mode, out):
    """One run, its rank threads pinned per `mode` (none, split, stacked); the median step."""
    cores = sorted(os.sched_getaffinity(0))
    ranks = 1
    for knob in ("--dp", "--tp", "--pp", "--cp"):
        if knob in layout:
            ranks *= int(layout[layout.index(knob) + 1])
    # --bind none: every mode starts unbound and pins from outside (auto binds round robin).
    p = subprocess.Popen(train_cmd(binary, layout + ["--bind", "none"], steps, out),
                         stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    if mode != "none":
        for r, tid in rank_threads(p.pid, ranks).items():
            core = r % len(cores) if mode == "split" else r * len(cores) // ranks
            try:
                os.sched_setaffinity(tid, {cores[core]})
            except OSError:
                pass
    p.wait()
    return median_step_ms(out)


def run_placement(binary, layout, steps, rounds, tmp):
    modes = ("none", "split", "stacked")
    got = {m: [] for m in modes}
    load0 = loadavg()
    for i in range(rounds):
        for m in modes:
            got[m].append(placed_run(binary, layout, steps, m, os.path.join(tmp, f"{m}.jsonl")))
        print(f"round {i + 1}: " + "  ".join(f"{m} {got[m][-1]:.1f} ms" for m in modes))
    for m in modes[1:]:
        ratios = [a / b for a, b in zip(got[m], got["none"])]
        print(f"{m} / unbound: median {statistics.median(ratios):.3f} (rounds "
              + " ".join(f"{x:.3f}" for x in ratios) + ")")
    print(f"load average {load0:.2f} -> {loadavg():.2f} on {os.cpu_count()} cores")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("mode", choices=("attribute", "placement"))
    ap.add_argument("layout", nargs="*", default=["first"],
                    help="first | best | -- train flags (default: first)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--realtime", action="store_true")
    a = ap.parse_intermixed_args(argv)
    layout = PRESETS[a.layout[0]] if len(a.layout) == 1 and a.layout[0] in PRESETS else a.layout
    with tempfile.TemporaryDirectory() as tmp:
        if a.mode == "attribute":
            run_attribute(a.binary, layout, a.steps, a.realtime, tmp)
        else:
            run_placement(a.binary, layout, a.steps, a.rounds, tmp)


if __name__ == "__main__":
    main(sys.argv[1:])
