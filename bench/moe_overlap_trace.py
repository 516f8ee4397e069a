#!/usr/bin/env python3
"""Reads a meshtrain --trace of an MoE run (docs/moe.md, "Overlapped all-to-all") and says,
per rank and summed over the steps after the first two, how long the experts computed
between exchanges, how long the rank waited on the ep group, and, where the ep group spans
processes (the hybrid world), when its worker moved the rows between processes: the share
of that inter-process time that fell inside the rank's expert compute and the share inside
its waits. The hypothesis this checks: the rows move mostly while the rank waits.

  bench/moe_overlap_trace.py TRACE.json [--from-step 3] [--parts-log] [--summary] [--breakdown]

--summary prints one line instead: the means over the ranks (bench/moe_overlap.sh reads it);
its step_exposed_ms is -1 for a trace without clock origins.
--breakdown says which exchange each ep wait finished (per step, mean over the ranks): the
count exchange (K), each dispatch (D0, D1, ..) and each combine (C0, .., the last one named
Clast), forward (the passes that start with a count exchange) and backward apart.
Arrival skew: an all-to-all cannot finish on any rank before the last rank of the group
has started it, so the part of a wait that lies before the latest start of the same
exchange on any rank (its "ep .. issued" mark; the ranks put on one time axis by their
clock_origin) is that peer still computing, load imbalance rather than communication. The
rest of the wait, from max(wait start, last peer's start) to its end, is the exchange's
own exposed time. --summary and --breakdown give both; the traced ranks are taken as one
ep group (bench/moe_overlap.sh runs ep = every rank), and a trace without the marks or
the clock origins (before stop 42) counts every wait whole.
--parts-log prints, for the first rank and the first traced step after the skip, every
exchange's issue, worker start/end and finish with times in ms from the step's start.
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

WORKER_OFFSET = 100000  # src/train/trace.cpp: a rank's comm worker track


def overlap(a, spans):
    """Seconds of interval a inside the union of the (sorted, disjoint) spans."""
    b, e = a
    return sum(max(0.0, min(e, se) - max(b, sb)) for sb, se in spans)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--from-step", type=int, default=3)
    ap.add_argument("--parts-log", action="store_true")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--breakdown", action="store_true")
    a = ap.parse_args()
    ev = json.load(open(a.trace))["traceEvents"]
    origin = {e["tid"]: e["args"]["steady_s"] * 1e6 for e in ev
              if e.get("ph") == "M" and e.get("name") == "clock_origin"}
    ev = [e for e in ev if e.get("ph") == "X"]
    steps = defaultdict(dict)  # rank -> step -> (b, e)
    for e in ev:
        if e["cat"] == "step":
            steps[e["tid"]][int(e["name"].split()[1])] = (e["ts"], e["ts"] + e["dur"])
    if not steps:
        sys.exit("no step spans in the trace")
    rows = []
    for rank in sorted(steps):
        windows = [w for s, w in sorted(steps[rank].items()) if s >= a.from_step]
        inside = lambda e: any(b <= e["ts"] < w for b, w in windows)
        mine = [e for e in ev if e["tid"] == rank and inside(e)]
        worker = [e for e in ev if e["tid"] == WORKER_OFFSET + rank and inside(e)]
        span = lambda e: (e["ts"], e["ts"] + e["dur"])
        experts = sorted(span(e) for e in mine if e["name"] == "experts")
        waits = sorted(span(e) for e in mine if e["name"] == "ep all-to-all wait")
        inter = [span(e) for e in worker if e["name"] == "all_to_all_v between processes"]
        n = max(1, len(windows))
        t_inter = sum(e - b for b, e in inter)
        rows.append({
            "rank": rank,
            "steps": len(windows),
            "experts_ms": sum(e - b for b, e in experts) / n / 1e3,
            "wait_ms": sum(e - b for b, e in waits) / n / 1e3,
            "inter_ms": t_inter / n / 1e3,
            "inter_under_experts": sum(overlap(i, experts) for i in inter) / t_inter if t_inter else None,
            "inter_under_wait": sum(overlap(i, waits) for i in inter) / t_inter if t_inter else None,
        })
    if a.breakdown:
        return breakdown(ev, steps, a.from_step, origin)
    if a.summary:
        mean = lambda k: sum(r[k] for r in rows) / len(rows)
        under = [r["inter_under_experts"] for r in rows if r["inter_under_experts"] is not None]
        split = split_waits(ev, steps, a.from_step, origin)
        med = lambda i: statistics.median(v[i] for v in per_step(split).values()) if split else 0
        print(f"experts_ms {mean('experts_ms'):.1f} wait_ms {mean('wait_ms'):.1f} inter_ms "
              f"{mean('inter_ms'):.1f} inter_under_experts "
              f"{(sum(under) / len(under)) if under else -1:.2f} "
              f"step_wait_ms {med(0):.1f} step_exposed_ms {med(1) if origin else -1:.1f}")
        return
    for r in rows:
        share = lambda v: "-" if v is None else f"{100 * v:.0f}%"
        print(f"rank {r['rank']}: per step experts {r['experts_ms']:.1f} ms, ep wait "
              f"{r['wait_ms']:.1f} ms, worker between processes {r['inter_ms']:.1f} ms "
              f"({share(r['inter_under_experts'])} of it under the experts, "
              f"{share(r['inter_under_wait'])} under the rank's waits)")
    if a.parts_log:
        rank = min(steps)
        s = min(k for k in steps[rank] if k >= a.from_step)
        b, w = steps[rank][s]
        log = [e for e in ev if e["tid"] in (rank, WORKER_OFFSET + rank) and b <= e["ts"] < w
               and e["cat"] in ("comm", "compute", "comm worker") and not e["name"].startswith("F")]
        for e in sorted(log, key=lambda e: e["ts"]):
            who = "worker" if e["tid"] >= WORKER_OFFSET else "rank  "
            print(f"  {who} {(e['ts'] - b) / 1e3:9.2f} ms +{e['dur'] / 1e3:8.2f}  {e['name']}")


def label_waits(mine):
    """(pass direction, label, ms, issue ts or None, wait begin, wait end) for each ep wait of
    one rank's step, in order. Dispatches are finished in issue order, then the combines in
    issue order (model/moe_parts.cpp), so a wait finishes the oldest unfinished dispatch if
    any, else the oldest combine, else it is a count exchange (which opens a forward pass)."""
    out, d_iss, d_done, c_iss, c_done, fwd = [], [], 0, [], 0, False
    k_iss = None
    for e in sorted(mine, key=lambda e: e["ts"]):
        n = e["name"]
        if n == "ep counts issued":
            k_iss = e["ts"]
        elif n == "ep dispatch issued":
            if d_iss and len(d_iss) == d_done == len(c_iss) == c_done:  # a pass without counts
                d_iss, d_done, c_iss, c_done = [], 0, [], 0
                fwd = False
            d_iss.append(e["ts"])
        elif n == "ep combine issued":
            c_iss.append(e["ts"])
        elif n == "ep all-to-all wait":
            ms, span = e["dur"] / 1e3, (e["ts"], e["ts"] + e["dur"])
            if d_done < len(d_iss):
                out.append((fwd, f"D{d_done}", ms, d_iss[d_done]) + span)
                d_done += 1
            elif c_done < len(c_iss):
                last = c_done + 1 == len(d_iss)
                out.append((fwd, "Clast" if last and c_done else f"C{c_done}", ms,
                            c_iss[c_done]) + span)
                c_done += 1
            else:
                d_iss, d_done, c_iss, c_done = [], 0, [], 0
                fwd = True
                out.append((fwd, "K", ms, k_iss) + span)
                k_iss = None
    return out


def split_waits(ev, steps, from_step, origin):
    """{(rank, step): [(direction, label, wait ms, exposed ms)]}: each wait and the part of it
    after the last rank's start of the same exchange (the n-th wait of a step is the same
    exchange on every rank). Times on one axis: ts + the rank's clock_origin."""
    waits = {}
    for rank in sorted(steps):
        off = origin.get(rank, 0.0)
        for s, (b, w) in sorted(steps[rank].items()):
            if s < from_step:
                continue
            mine = [e for e in ev if e["tid"] == rank and b <= e["ts"] < w]
            waits[(rank, s)] = [(f, lab, ms, None if i is None else i + off, wb + off, we + off)
                                for f, lab, ms, i, wb, we in label_waits(mine)]
    out = {}
    for (rank, s), ws in waits.items():
        peers = [waits[(r, s)] for r in steps if (r, s) in waits]
        same = all(len(p) == len(ws) and all(x[1] == y[1] for x, y in zip(p, ws)) for p in peers)
        res = []
        for n, (f, lab, ms, iss, wb, we) in enumerate(ws):
            starts = [p[n][3] for p in peers] if same else [None]
            if not origin or None in starts:  # an older trace, or ranks that disagree: whole
                res.append((f, lab, ms, ms))
                continue
            res.append((f, lab, ms, max(0.0, we - max(wb, max(starts))) / 1e3))
        out[(rank, s)] = res
    return out


def per_step(split):
    """step -> (wait ms, exposed ms), each the mean over the ranks of the step's sum."""
    by = defaultdict(list)
    for (rank, s), ws in split.items():
        by[s].append((sum(w[2] for w in ws), sum(w[3] for w in ws)))
    return {s: tuple(sum(v[i] for v in vs) / len(vs) for i in (0, 1)) for s, vs in by.items()}


def breakdown(ev, steps, from_step, origin):
    split = split_waits(ev, steps, from_step, origin)
    sums, n = defaultdict(lambda: [0.0, 0.0]), len(split)
    for ws in split.values():
        for f, lab, ms, exposed in ws:
            sums[("F" if f else "B", lab)][0] += ms
            sums[("F" if f else "B", lab)][1] += exposed
    order = lambda k: (k[0] != "F", k[1] != "K", k[1] == "Clast", k[1][0], int(k[1][1:] or 0)
                       if k[1][1:].isdigit() else 0)
    total = sum(v[0] for v in sums.values()) / max(1, n)
    real = sum(v[1] for v in sums.values()) / max(1, n)
    if not origin:
        print("(no clock_origin in the trace, before stop 42: every wait counted whole)")
    print(f"ep wait per rank-step {total:.1f} ms over {n} rank-steps, of it {real:.1f} ms after "
          f"the last rank's start of the exchange (the rest: peers arriving late);")
    print("by exchange: wait ms, share of the wait | after the last start ms, share of that")
    for k in sorted(sums, key=order):
        v, x = (t / max(1, n) for t in sums[k])
        print(f"  {k[0]} {k[1]:>5} {v:8.1f} {100 * v / total if total else 0:5.1f}% |"
              f" {x:8.1f} {100 * x / real if real else 0:5.1f}%")


if __name__ == "__main__":
    main()
