#!/usr/bin/env python3
"""Pipeline bubble from a run's trace (`meshtrain train --trace FILE`), counted in idle time
of a replay rather than read off the wall clock.

On a loaded machine (more ranks than free cores) the trainer's own `bubble` metric -- idle /
step time on each rank's clock -- mostly measures the operating system's scheduler: a rank
waiting for a core looks idle. This script keeps what the run itself decided and measured,
and drops the waiting for cores:

  * the order: each rank's compute actions as the executor ran them, taken from the trace
    (an F&B pair appears as its two halves, in the order they ran);
  * the costs: a low quantile (--quantile, default 0: the fastest) of the durations of
    each (rank, F|B|W, model chunk) action over the traced steps after the first. An
    action whose thread lost its core lasts tens of times longer (on a loaded machine the
    durations are bimodal, often with most of them preempted), so the median is not
    robust; the fastest is the action's cost when it had a core, and keeps the stages'
    real imbalance (the embedding and the head, a V's two chunks);
  * the dependencies: F of model chunk k of microbatch j after F of chunk k-1 of j, B of
    chunk k after B of chunk k+1 (the last chunk's B after its own F), wherever those ran,
    plus `--latency` seconds per cross-rank dependency.

It replays one step as early as possible under those rules and reports, per rank, busy and
idle time and bubble = total idle / (ranks x makespan), the simulator's definition
(docs/pipeline.md). With --unit every action costs 1 instead: the replay then equals
`meshtrain schedule` for the schedule the run used, which checks that the trace holds the
schedule's order.

    bench/pp_trace_bubble.py TRACE.json [--metrics M.jsonl] [--unit] [--quantile Q]
                             [--latency S] [--json]
"""
import argparse
import json
import re
import statistics
import sys

NAME = re.compile(r"^(\d+)([FBW])(\d+)$")


def steps_of(events):
    """Per rank (tid), the list of steps, each a list of (kind, model chunk, microbatch, dur)."""
    ranks = {}
    for e in sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e["ts"]):
        if e.get("cat") != "compute":
            continue
        steps = ranks.setdefault(e["tid"], [[]])
        if e["name"] == "optimizer":
            steps.append([])
            continue
        m = NAME.match(e["name"])
        if m:
            steps[-1].append((m.group(2), int(m.group(1)), int(m.group(3)), e["dur"] * 1e-6))
    # The last entry is what followed the last optimizer step: empty unless the run stopped.
    return {r: [s for s in steps if s] for r, steps in ranks.items()}


def quantile_costs(ranks, skip_first, q):
    """(rank, kind, chunk) -> the q-quantile of its seconds over the steps after the first."""
    samples = {}
    for r, steps in ranks.items():
        for s in steps[1:] if skip_first and len(steps) > 1 else steps:
            for kind, chunk, _, dur in s:
                samples.setdefault((r, kind, chunk), []).append(dur)
    return {k: sorted(v)[int(q * (len(v) - 1))] for k, v in samples.items()}


def replay(order, cost, latency):
    """order: rank -> [(kind, chunk, mb)]; cost(rank, kind, chunk) -> seconds. Returns
    (makespan, busy per rank). Raises if the order cannot run (a dependency never met)."""
    last_chunk = max(c for ops in order.values() for _, c, _ in ops)
    where = {(k, c, mb): r for r, ops in order.items() for k, c, mb in ops}
    done, clock, pos = {}, {r: 0.0 for r in order}, {r: 0 for r in order}
    busy = {r: 0.0 for r in order}

    def ready(r, kind, chunk, mb):
        if kind == "F":
            dep = ("F", chunk - 1, mb) if chunk > 0 else None
        elif kind == "B":
            dep = ("B", chunk + 1, mb) if chunk < last_chunk else ("F", chunk, mb)
        else:
            dep = ("B", chunk, mb)
        if dep is None:
            return 0.0
        if dep not in done:
            return None
        return done[dep] + (latency if where[dep] != r else 0.0)

    progress = True
    while progress:
        progress = False
        for r, ops in order.items():
            while pos[r] < len(ops):
                kind, chunk, mb = ops[pos[r]]
                t = ready(r, kind, chunk, mb)
                if t is None:
                    break
                start = max(clock[r], t)
                d = cost(r, kind, chunk)
                clock[r] = done[(kind, chunk, mb)] = start + d
                busy[r] += d
                pos[r] += 1
                progress = True
    stuck = [r for r, ops in order.items() if pos[r] < len(ops)]
    if stuck:
        raise SystemExit(f"pp_trace_bubble: the traced order deadlocks at ranks {stuck}")
    return max(clock.values()), busy


def paper_bubble(order, cost):
    """The DualPipe paper's bubble (its README's table) with the traced costs: idle per device
    1F1B (P-1)(F+B), ZB1P (P-1)(F+B-2W), DualPipeV (P/2-1)(F&B+B-3W) with P = 2 x ranks
    chunk stages, B the full backward (B+W) and F&B = F+B (this engine runs the halves one
    after the other). F, B, W: the mean over ranks and chunks of one chunk's action; the
    bubble is idle / (idle + the mean busy time)."""
    kinds = {}
    for r, ops in order.items():
        for k, c in {(k, c) for k, c, _ in ops}:
            kinds.setdefault(k, []).append(cost(r, k, c))
    F, Bi = statistics.mean(kinds["F"]), statistics.mean(kinds["B"])
    W = statistics.mean(kinds["W"]) if "W" in kinds else 0.0
    B = Bi + W
    ranks = len(order)
    chunks = max(len({c for _, c, _ in ops}) for ops in order.values())
    if chunks == 2:
        idle, name = (ranks - 1) * ((F + B) + B - 3 * W), "DualPipeV (P/2-1)(F&B+B-3W)"
    elif W > 0:
        idle, name = (ranks - 1) * (F + B - 2 * W), "ZB1P (P-1)(F+B-2W)"
    else:
        idle, name = (ranks - 1) * (F + B), "1F1B (P-1)(F+B)"
    busy = statistics.mean(sum(cost(r, k, c) for k, c, _ in ops) for r, ops in order.items())
    return name, idle / (idle + busy)


def metric_bubble(path):
    """The trainer's wall-clock bubble, mean over steps after the first."""
    vals = [json.loads(l).get("bubble") for l in open(path)]
    vals = [v for v in vals if v is not None]
    return statistics.mean(vals[1:] if len(vals) > 1 else vals) if vals else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--metrics", help="the run's --metrics file: also print its wall-clock bubble")
    ap.add_argument("--unit", action="store_true", help="every action costs 1 (order check)")
    ap.add_argument("--quantile", type=float, default=0.0, help="of each action's durations")
    ap.add_argument("--latency", type=float, default=0.0, help="seconds per cross-rank dependency")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ranks = steps_of(json.load(open(a.trace))["traceEvents"])
    if not ranks or any(not s for s in ranks.values()):
        sys.exit("pp_trace_bubble: no pipeline actions in the trace (was --pp > 1?)")
    if not 0 <= a.quantile <= 1:
        sys.exit("pp_trace_bubble: --quantile must be in [0, 1]")
    costs = quantile_costs(ranks, skip_first=True, q=a.quantile)
    cost = (lambda r, k, c: 1.0) if a.unit else (lambda r, k, c: costs[(r, k, c)])
    order = {r: [(k, c, mb) for k, c, mb, _ in steps[-1]] for r, steps in ranks.items()}
    makespan, busy = replay(order, cost, a.latency)
    idle = {r: makespan - b for r, b in busy.items()}
    out = {"ranks": len(order), "steps": min(len(s) for s in ranks.values()),
           "makespan": makespan, "busy": busy, "idle": idle,
           "bubble": sum(idle.values()) / (len(order) * makespan)}
    out["paper_formula"], out["paper_bubble"] = paper_bubble(order, cost)
    if a.metrics:
        out["wall_clock_bubble"] = metric_bubble(a.metrics)
    if a.json:
        print(json.dumps(out))
        return
    unit = "units" if a.unit else "s"
    print(f"replayed step ({out['steps']} traced, {'unit costs' if a.unit else f'{a.quantile} quantile costs'}): "
          f"makespan {makespan:.6g} {unit}")
    for r in sorted(order):
        print(f"  rank {r}: busy {busy[r]:.6g} {unit}, idle {idle[r]:.6g} {unit}")
    print(f"bubble: {100 * out['bubble']:.1f}% (replayed idle / (ranks x makespan))")
    print(f"DualPipe paper's formula, {out['paper_formula']}: {100 * out['paper_bubble']:.1f}%")
    if out.get("wall_clock_bubble") is not None:
        print(f"wall-clock bubble (the run's metric): {100 * out['wall_clock_bubble']:.1f}%")


if __name__ == "__main__":
    main()
