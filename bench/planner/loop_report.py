"""The closed loop's report (closed_loop.py): per layout predicted against measured, the
error figures (wall, CPU-time estimate, without the calibration's reference layouts,
relative to one rank of the same precision) and OUT_DIR/closed_loop.json."""
import json
import os
import statistics

from loop_measure import loadavg


def layout_rows(chosen, preds, walls, cpus, rounds):
    """One line per layout; returns the wall and CPU rows, their |errors| and the spreads."""
    rows, cpu_rows, errs, cpu_errs, spreads = [], [], [], [], []
    for name, ranks, k in chosen:
        pred = preds[name]
        wall = statistics.median(walls[name])
        finite = [c for c in cpus[name] if c == c]
        cpu = statistics.median(finite) if finite else float("nan")
        spreads.append(max(walls[name]) / min(walls[name]) - 1)
        err, cerr = pred / wall - 1, pred / cpu - 1
        errs.append(abs(err))
        cpu_errs.append(abs(cerr))
        rows.append((name, ranks, pred, wall, err))
        cpu_rows.append((name, ranks, pred, cpu, cerr))
        each = " ".join(f"{w * 1e3:.1f}" for w in walls[name]) if rounds > 1 else ""
        print(f"{name:24} ranks {ranks}  predicted {pred * 1e3:8.1f} ms  measured wall "
              f"{wall * 1e3:8.1f} ms ({err:+.1%})  cpu-time estimate {cpu * 1e3:8.1f} ms "
              f"({cerr:+.1%})" + (f"  rounds {each}" if each else ""), flush=True)
    return rows, cpu_rows, errs, cpu_errs, spreads


def error_summary(rows, cpu_rows, errs, cpu_errs, load0):
    """The goal's figures, then the two views that take the host's load out."""
    load1 = loadavg()
    print(f"wall: mean |error| {statistics.mean(errs):.1%}, max {max(errs):.1%}; cpu-time "
          f"estimate: mean {statistics.mean(cpu_errs):.1%}, max {max(cpu_errs):.1%}; over "
          f"{len(errs)} layouts (goal: mean <= 10%, max <= 20%); load average {load0:.2f} -> "
          f"{load1:.2f} on {os.cpu_count()} cores"
          # The runs' own ranks raise the load (4 rank threads on 2 cores read 2+): only the
          # load found before the first run says whether something else was running.
          + ("  NOT VALID: the machine was busy before the runs"
             if load0 > (os.cpu_count() or 1) - 0.5
             else ""))
    # The calibration's reference steps measured the "1 rank" layouts' model and shape itself
    # (step_factor_*) and the dp2 ZeRO 0 one (parallel_efficiency): the error over the other
    # layouts is the model's between layouts.
    others = [(e, n) for e, (n, *_rest) in zip(errs, rows)
              if n not in ("1 rank", "bf16 1 rank", "dp2 z0")]
    if others and len(others) < len(errs):
        worst = max(others)
        print(f"wall, without the calibration's three reference layouts: mean |error| "
              f"{statistics.mean(e for e, _ in others):.1%}, max {worst[0]:.1%} ({worst[1]}) "
              f"over {len(others)} layouts")
    # Against the one-rank layout of the same precision: a load that slows every run alike
    # (the other processes' share of the cores, their cache and memory traffic) cancels, so
    # on a loaded machine this shows the model's errors between layouts.
    ones = {r[0].startswith("bf16"): r for r in cpu_rows if r[0] in ("1 rank", "bf16 1 rank")}
    rel = []
    for name, ranks, pred, cpu, _ in cpu_rows:
        one = ones.get(name.startswith("bf16"))
        if one and name != one[0]:
            rel.append(abs((pred / one[2]) / (cpu / one[3]) - 1))
    if rel:
        print(f"cpu-time estimate relative to one rank of the same precision: mean |error| "
              f"{statistics.mean(rel):.1%}, max {max(rel):.1%} over {len(rel)} layouts")
    return load1


def unmeasurable_summary(rows, unmeasurable, limit):
    """The layouts still spread after every re-measure pass (loop_rounds.py): listed, and the
    wall figures once more without them. The goal line above keeps them: a window that cannot
    measure a layout says so instead of dropping it."""
    if not unmeasurable:
        return
    kept = [(abs(r[4]), r[0]) for r in rows if r[0] not in unmeasurable]
    print(f"unmeasurable in this window (middle rounds still spread past {limit:.0%} after "
          f"every re-measure pass): {', '.join(unmeasurable)}")
    if kept:
        worst = max(kept)
        print(f"wall, without the {len(unmeasurable)} unmeasurable layouts: mean |error| "
              f"{statistics.mean(e for e, _ in kept):.1%}, max {worst[0]:.1%} ({worst[1]}) "
              f"over {len(kept)} layouts")


def report(out, chosen, preds, walls, cpus, rounds, limit, remeasured, drift, load0,
           unmeasurable=()):
    rows, cpu_rows, errs, cpu_errs, spreads = layout_rows(chosen, preds, walls, cpus, rounds)
    if rounds > 1:
        print(f"round-to-round spread of one layout's wall (max/min - 1): median "
              f"{statistics.median(spreads):.1%}, max {max(spreads):.1%}; "
              f"{len(remeasured)} layouts spread by more than {limit:.0%} and were re-measured "
              f"({', '.join(remeasured) or 'none'})")
    if rounds < 3:
        print(f"only {rounds} round(s): not a goal measurement (the goal is the median of >= 3)")
    load1 = error_summary(rows, cpu_rows, errs, cpu_errs, load0)
    unmeasurable_summary(rows, list(unmeasurable), limit)
    flagged = drift.summary({r[0]: abs(r[4]) for r in rows}) if drift else []
    with open(os.path.join(out, "closed_loop.json"), "w") as f:
        json.dump({"drift_events": drift.events if drift else [], "drift_flagged": flagged,
                   "rows": rows, "cpu_rows": cpu_rows, "load": [load0, load1],
                   "cores": os.cpu_count(), "rounds": walls, "spread_limit": limit,
                   "remeasured": remeasured, "unmeasurable": list(unmeasurable)}, f)
