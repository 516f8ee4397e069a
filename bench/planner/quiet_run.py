#!/usr/bin/env python3
"""Issue #30's whole local check in one command, for a quiet machine: the calibration, the
closed loop (>= 30 layouts, medians of interleaved rounds) and the 4-rank brute force (cp and
DualPipe-V among its layouts), then one summary with the two goals.

Usage: python3 bench/planner/quiet_run.py build/meshtrain OUT_DIR [--calibrate-seconds 30]
       [--steps 10] [--rounds 3] [--brute-steps 6] [--max-load 1.5] [--wait 300]
       [--skip-brute] [--quick] [--estimate-only]

Phases, each a child command whose output goes to OUT_DIR/<phase>.log and to the terminal:
  calibrate   meshtrain plan --calibrate --calibrate-seconds S --profile OUT_DIR/local.toml
              (skipped when the profile exists)
  closed loop closed_loop.py build/meshtrain OUT_DIR --steps N --rounds R
  brute force closed_loop.py build/meshtrain OUT_DIR --steps B --brute-force
Before each phase it waits (up to --wait seconds) for the 1-minute load to fall below
--max-load, since a phase measured on a busy machine measures the machine, and says so.

Duration: before the measuring phases it prints an estimate from the planner's own
predictions (runs x (steps x predicted step + the per-run start-up measured on this
machine)); at the end each phase's elapsed time. --estimate-only prints the estimate (from
an existing OUT_DIR/local.toml, or after the calibration) and stops. --quick is the harness check for a loaded
machine (a 3 s calibration, 6 layouts of 1 round, a 3-layout brute force): it proves that
every phase runs, nothing about the model.
"""
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import loop_layouts  # noqa: E402
from brute_force import brute_candidates  # noqa: E402
from loop_layouts import LAYOUTS, resolve  # noqa: E402
from loop_measure import loadavg, measure, predict  # noqa: E402

# The --quick slice: one layout of each kind the goal names (GPT, Llama, MoE, cp, dualpipev;
# fp32 and bf16).
QUICK_ONLY = ["1 rank", "bf16 1 rank", "moe ep2 dp2", "llama cp2 ring", "pp2 dualpipev m4",
              "llama 1 rank"]


def arg(name, default, kind=str):
    return kind(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def wait_quiet(max_load, wait):
    """Waits until the 1-minute load is below max_load (at most `wait` s); returns the load
    found and whether it was quiet."""
    t0 = time.time()
    while loadavg() >= max_load and time.time() - t0 < wait:
        time.sleep(10)
    load = loadavg()
    if load >= max_load:
        print(f"quiet_run: load {load:.2f} >= {max_load} after {wait} s: measuring anyway; "
              "the figures of this phase are NOT results", flush=True)
    return load, load < max_load


def run_phase(name, cmd, out):
    """Runs one phase's command, its output teed to OUT/<name>.log; returns (seconds, text)."""
    print(f"quiet_run: {name}: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    lines = []
    with open(os.path.join(out, name.replace(" ", "_") + ".log"), "w") as log:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in p.stdout:
            sys.stdout.write(line)
            log.write(line)
            lines.append(line)
        p.wait()
    if p.returncode != 0:
        raise SystemExit(f"quiet_run: {name} failed (exit {p.returncode})")
    return time.time() - t0, "".join(lines)


def startup_seconds(binary, out):
    """A run's cost beyond its steps on this machine: a 3-step one-rank run's elapsed time
    less its three step times (process start, model build, first-step warm-up)."""
    k = resolve(dict(dp=1, tp=1, pp=1, mb_div=1))
    t0 = time.time()
    wall, _ = measure(binary, out, 1, k, 3)
    return max(0.0, time.time() - t0 - 3 * wall)


def estimate(binary, out, profile, only, steps, rounds, brute_steps, brute_limit):
    """Seconds the loop and the brute force should take, from the planner's predictions."""
    start = startup_seconds(binary, out)
    chosen = [(n, r, resolve(k)) for n, r, k in LAYOUTS if not only or n in only]
    loop = sum(rounds * (start + steps * predict(binary, profile, r, k)) for n, r, k in chosen)
    # The drift checks: the two reference steps (8 steps each) every 12 layout runs.
    checks = 2 * (2 + len(chosen) * rounds // 12)
    loop += checks * (start + 8 * predict(binary, profile, 1, chosen[0][2]))
    cands = brute_candidates(binary, profile, "llama")
    if brute_limit:
        cands = cands[:brute_limit]
    times = [c["predicted"]["step_time_s"] for c in cands]
    brute = sum(start + brute_steps * t for t in times)
    # The finalists: the first choice and the 5 best measured, 3 rounds of >= 10 steps.
    finalists = min(6, len(times))
    brute += finalists * 3 * (start + max(brute_steps, 10) * min(times))
    return start, len(chosen), loop, len(cands), brute


def summary(loop_text, brute_text):
    """The goal lines of the two phases' outputs."""
    got = []
    for pat in (r"^wall: mean .*$", r"^wall, without .*$", r"^round-to-round .*$",
                r"^drift: .*$", r"^only \d+ round.*$"):
        got += re.findall(pat, loop_text, re.M)
    for pat in (r"^wall: planner's #1 .*$", r"^re-measured \(.*$"):
        got += re.findall(pat, brute_text, re.M)
    return got


def main():
    binary, out = sys.argv[1], sys.argv[2]
    quick = "--quick" in sys.argv
    seconds = arg("--calibrate-seconds", "3" if quick else "30")
    steps = arg("--steps", 4 if quick else 10, int)
    rounds = arg("--rounds", 1 if quick else 3, int)
    brute_steps = arg("--brute-steps", 4 if quick else 6, int)
    max_load, wait = arg("--max-load", 1.5, float), arg("--wait", 300, int)
    only = QUICK_ONLY if quick else None
    brute_limit = 3 if quick else None
    os.makedirs(out, exist_ok=True)
    profile = os.path.join(out, "local.toml")
    me = [sys.executable, os.path.join(HERE, "closed_loop.py"), binary, out]
    t_all, took, loads = time.time(), {}, {}

    if not os.path.exists(profile):
        loads["calibrate"] = wait_quiet(max_load, wait)
        took["calibrate"], _ = run_phase("calibrate", [
            binary, "plan", "--calibrate", "--calibrate-seconds", seconds, "--profile", profile],
            out)
    start, n, loop_s, nb, brute_s = estimate(binary, out, profile, only, steps, rounds,
                                             brute_steps, brute_limit)
    print(f"quiet_run: estimate: closed loop {n} layouts x {rounds} rounds x {steps} steps "
          f"{loop_s / 60:.1f} min (+ up to 60% where rounds spread and are re-measured); brute "
          f"force {nb} layouts x {brute_steps} steps + up to 6 finalists x 3 rounds "
          f"{brute_s / 60:.1f} min; start-up {start:.2f} s a run", flush=True)
    if "--estimate-only" in sys.argv:
        return

    loads["closed loop"] = wait_quiet(max_load, wait)
    extra = ["--only", ",".join(only)] if only else []
    took["closed loop"], loop_text = run_phase(
        "closed loop", me + ["--steps", str(steps), "--rounds", str(rounds)] + extra, out)
    brute_text = ""
    if "--skip-brute" not in sys.argv:
        loads["brute force"] = wait_quiet(max_load, wait)
        lim = ["--limit", str(brute_limit)] if brute_limit else []
        took["brute force"], brute_text = run_phase(
            "brute force", me + ["--steps", str(brute_steps), "--brute-force"] + lim, out)

    print("\nquiet_run summary" + (" (--quick: a harness check, not a result)" if quick else ""))
    for line in summary(loop_text, brute_text):
        print("  " + line)
    for phase, sec in took.items():
        load, quiet = loads[phase]
        print(f"  {phase}: {sec / 60:.1f} min, load {load:.2f} at its start"
              + ("" if quiet else "  (BUSY: not a result)"))
    print(f"  total {(time.time() - t_all) / 60:.1f} min; logs in {out}")
    with open(os.path.join(out, "quiet_run.json"), "w") as f:
        json.dump({"took_s": took, "loads": loads, "summary": summary(loop_text, brute_text),
                   "estimate_s": {"loop": loop_s, "brute": brute_s, "startup": start},
                   "model": loop_layouts.MODEL}, f)


if __name__ == "__main__":
    main()
