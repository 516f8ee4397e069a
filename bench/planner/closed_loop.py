#!/usr/bin/env python3
"""Closed loop on this machine: the planner's predicted step time against meshtrain's
measured one, for many layouts from one calibration.

Usage: python3 bench/planner/closed_loop.py build/meshtrain OUT_DIR [--calibrate-seconds S]
       [--steps N] [--rounds R] [--spread X]
       [--brute-force [--brute-arch llama|gpt2] [--limit N] [--realtime]]
       [--model medium|tiny] [--only NAME,NAME] [--check-every N]

1. `meshtrain plan --calibrate` writes OUT_DIR/local.toml (skipped when it exists).
2. For each layout: `meshtrain plan --hardware local` with every knob fixed (one candidate)
   gives the prediction; `meshtrain train` with the same layout for N steps gives the
   measurement (median step_time_s of the steps after the first two). The layouts run in
   R interleaved rounds (default 3: round r of every layout before round r + 1), each
   layout's wall the median over its rounds. A layout whose rounds spread by more than
   --spread (default 0.20: max / min - 1) is measured R more times, interleaved among such
   layouts, and its wall becomes the median of all its rounds; again, up to three passes
   (loop_rounds.REMEASURE_PASSES), while the middle of its rounds still spreads past the
   limit. It is never dropped: the output lists every re-measured layout with its raw
   rounds, and one still spread after the last pass is listed as unmeasurable in that
   window, with the wall figures once more without it beside the goal line that keeps it.
   Drift check (drift_check.py; a profile with the calibration rounds' band, medium model):
   the calibration's reference step is run again at the start, every --check-every (default
   12) layout runs and at the end, and compared with the band; layouts measured mostly next
   to a check outside it are listed, and the error figures are also given without them.
3. --brute-force: every valid 4-rank layout is measured and the planner's first choice is
   compared with the best measured one; then the first choice and the 5 best measured are
   run again, 20 steps a run, in brackets (finalist_brackets.py: each layout forward then in
   reverse, the first choice over each finalist per bracket, the median of those ratios, 4
   brackets and more, up to 8, while the result straddles the goal; the best of many single
   noisy runs is biased low), the first choice's gap split into work and idle. --realtime runs every brute-force step under SCHED_FIFO (chrt -f 10): a diagnostic
   that takes other programs and the normal scheduler's placement out of the measurement.
The load average is printed before and after: on a shared machine a high load makes the
measurement, not the model, the larger error.
"""
import os
import subprocess
import sys

import drift_check
import loop_layouts
from brute_force import brute_force
from loop_layouts import LAYOUTS, MODELS, knob_args, resolve  # noqa: F401 (replay_logs, plan_golden)
from loop_measure import loadavg, measure, predict
from loop_report import report
from loop_rounds import SPREAD_LIMIT, remeasure_spread, run_rounds


def drift_monitor(binary, out, profile):
    """The drift check where the profile has a band and the model is the reference one."""
    every = int(sys.argv[sys.argv.index("--check-every") + 1]) if "--check-every" in sys.argv \
        else 12
    bands = drift_check.read_bands(profile)
    if not every or not bands or loop_layouts.MODEL != MODELS["medium"]:
        print("no drift check (" + ("--check-every 0" if not every else "no band in the profile:"
                                    " a one-round or older calibration" if not bands
                                    else "--model is not the calibration's reference") + ")")
        return None

    def reference(prec):
        k = resolve(dict(dp=1, tp=1, pp=1, mb_div=1, precision=prec))
        return measure(binary, out, 1, k, drift_check.REFERENCE_STEPS,
                       extra=drift_check.REFERENCE_EXTRA)[0]

    return drift_check.DriftMonitor(reference, bands, every)


def arg(name, default, kind=str):
    return kind(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def closed_loop(binary, out, profile, steps):
    """The layouts in interleaved rounds, the spread ones re-measured, then the report."""
    only = arg("--only", None, lambda s: s.split(","))
    rounds = arg("--rounds", 3, int)
    limit = arg("--spread", SPREAD_LIMIT, float)
    chosen = [(name, ranks, resolve(k)) for name, ranks, k in LAYOUTS
              if not only or any(o == name for o in only)]
    preds = {name: predict(binary, profile, ranks, k) for name, ranks, k in chosen}
    load0 = loadavg()
    walls = {name: [] for name, _, _ in chosen}
    cpus = {name: [] for name, _, _ in chosen}
    drift = drift_monitor(binary, out, profile)
    if drift:
        drift.check("start")
    run_rounds(binary, out, chosen, rounds, steps, walls, cpus, drift=drift)
    remeasured, unmeasurable = remeasure_spread(binary, out, chosen, rounds, steps, walls, cpus,
                                                limit, drift)
    if drift:
        drift.check("end")
    report(out, chosen, preds, walls, cpus, rounds, limit, remeasured, drift, load0, unmeasurable)


def main():
    binary, out = sys.argv[1], sys.argv[2]
    if "--model" in sys.argv:
        loop_layouts.MODEL = MODELS[arg("--model", "medium")]
    seconds = arg("--calibrate-seconds", "30")
    steps = arg("--steps", 10, int)
    os.makedirs(out, exist_ok=True)
    profile = os.path.join(out, "local.toml")
    if not os.path.exists(profile):
        subprocess.run([binary, "plan", "--calibrate", "--calibrate-seconds", seconds,
                        "--profile", profile], check=True)
    if "--brute-force" in sys.argv:
        brute_force(binary, out, profile, steps, arg("--brute-arch", "llama"),
                    arg("--limit", None, int), "--realtime" in sys.argv)
        return
    closed_loop(binary, out, profile, steps)


if __name__ == "__main__":
    main()
