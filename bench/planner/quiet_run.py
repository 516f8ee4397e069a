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
  gemm shapes build/tests/bench_plan_gemm --profile OUT_DIR/local.toml --rows 1024/512/256/128
              (the engine's linears at the layouts' row counts against the GEMM formula; the
              summary gives the largest departure from the 1024-row ratio; then --cold, the
              operands in memory; ~20-40 s)
  closed loop closed_loop.py build/meshtrain OUT_DIR --steps N --rounds R
  brute force closed_loop.py build/meshtrain OUT_DIR --steps B --brute-force
Before each phase it waits (up to --wait seconds) for the 1-minute load to fall below
--max-load, since a phase measured on a busy machine measures the machine, and says so.

Duration: before the measuring phases it prints an estimate from the planner's own
predictions (runs x (steps x predicted step + the per-run start-up measured on this
machine)); at the end each phase's elapsed time. --estimate-only prints the estimate (from
an existing OUT_DIR/local.toml, or after the calibration) and stops. --quick is the harness
check for a loaded machine (a 3 s calibration, 6 layouts of 1 round, a 3-layout brute
force): it proves that every phase runs, nothing about the model.
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
from brute_force import FINALIST_STEPS, brute_candidates  # noqa: E402
from finalist_brackets import BRACKETS, MAX_BRACKETS  # noqa: E402
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
    # The finalists: the first choice and the 5 best measured, BRACKETS brackets of two runs
    # each (forward and back) of FINALIST_STEPS steps; up to MAX_BRACKETS where the result
    # straddles the goal (the estimate counts the first BRACKETS).
    finalists = min(6, len(times))
    brute += finalists * 2 * BRACKETS * (start + FINALIST_STEPS * min(times))
    return start, len(chosen), loop, len(cands), brute


# The rows a rank's GEMMs run on in the loop's layouts (the medium model's 8 x 128 tokens):
# one microbatch, dp 2's share, 2-sequence and 1-sequence microbatches.
SHAPE_ROWS = (1024, 512, 256, 128)
SHAPE_LINE = re.compile(r"^(fp32|bf16) (\S+) +N (\d+) .*measured/model ([\d.]+) ([\d.]+) "
                        r"([\d.]+)\)$", re.M)


def shape_departure(text):
    """From bench_plan_gemm's lines at SHAPE_ROWS: per precision, the largest departure of a
    linear's measured/model ratio at fewer rows from its ratio at 1024 rows (the reference
    step's shape, which the step factor fits): how far the GEMM formula's row dependence is
    from the engine's at the microbatch shapes the layouts run. {prec: (departure, where)}."""
    ratios = {}
    for prec, name, rows, *r in SHAPE_LINE.findall(text):
        for i, pas in enumerate(("fwd", "bwd_in", "bwd_w")):
            ratios[(prec, name, pas, int(rows))] = float(r[i])
    worst = {}
    for (prec, name, pas, rows), v in ratios.items():
        ref = ratios.get((prec, name, pas, SHAPE_ROWS[0]))
        if rows == SHAPE_ROWS[0] or not ref:
            continue
        dep = v / ref - 1
        if abs(dep) > abs(worst.get(prec, (0, ""))[0]):
            worst[prec] = (dep, f"{name} {pas} at {rows} rows")
    return worst


def gemm_shapes(binary, out, profile, cold):
    """The engine's linears at the layouts' row counts against the GEMM formula
    (bench_plan_gemm, next to the binary's build: build/tests/), operands in the caches or
    (cold) in memory; '' where it is not built."""
    tool = os.path.join(os.path.dirname(os.path.abspath(binary)), "tests", "bench_plan_gemm")
    if not os.path.exists(tool):
        print(f"quiet_run: no {tool}: the GEMM shape check is left out "
              "(scripts/build.sh --target bench_plan_gemm)")
        return ""
    text = ""
    name = "gemm_shapes_cold.log" if cold else "gemm_shapes.log"
    with open(os.path.join(out, name), "w") as log:
        for rows in SHAPE_ROWS:
            p = subprocess.run([tool, "--profile", profile, "--rows", str(rows)]
                               + (["--cold"] if cold else []), capture_output=True, text=True)
            log.write(p.stdout)
            text += p.stdout
    return text


def summary(loop_text, brute_text):
    """The goal lines of the two phases' outputs."""
    got = []
    for pat in (r"^wall: mean .*$", r"^wall, without .*$", r"^round-to-round .*$",
                r"^unmeasurable in this window.*$",
                r"^drift: .*$", r"^wall, the layouts measured within .*$",
                r"^only \d+ round.*$"):
        got += re.findall(pat, loop_text, re.M)
    for pat in (r"^wall: planner's #1 .*$", r"^re-measured \(.*$", r"^the gap in two: .*$"):
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
          f"{loop_s / 60:.1f} min (+ about 60% where rounds spread and are re-measured, more "
          f"where a layout stays spread: up to 3 passes); brute "
          f"force {nb} layouts x {brute_steps} steps + up to 6 finalists x {BRACKETS} brackets "
          f"(2 runs each; up to {MAX_BRACKETS} brackets where unsettled) x {FINALIST_STEPS} steps "
          f"{brute_s / 60:.1f} min; start-up {start:.2f} s a run", flush=True)
    if "--estimate-only" in sys.argv:
        return
    loads["gemm shapes"] = wait_quiet(max_load, wait)
    t0 = time.time()
    shapes = {cold: shape_departure(gemm_shapes(binary, out, profile, cold))
              for cold in (False, True)}
    took["gemm shapes"] = time.time() - t0

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
    for cold, worst in shapes.items():
        for prec, (dep, where) in worst.items():
            print(f"  {prec} linears ({'cold' if cold else 'warm'} operands), measured/model at "
                  f"fewer rows over at 1024 rows: largest departure {dep:+.1%} ({where}; "
                  f"gemm_shapes{'_cold' if cold else ''}.log)")
    for phase, sec in took.items():
        load, quiet = loads[phase]
        print(f"  {phase}: {sec / 60:.1f} min, load {load:.2f} at its start"
              + ("" if quiet else "  (BUSY: not a result)"))
    print(f"  total {(time.time() - t_all) / 60:.1f} min; logs in {out}")
    with open(os.path.join(out, "quiet_run.json"), "w") as f:
        json.dump({"took_s": took, "loads": loads, "summary": summary(loop_text, brute_text),
                   "gemm_shape_departure": {"warm": shapes[False], "cold": shapes[True]},
                   "estimate_s": {"loop": loop_s, "brute": brute_s, "startup": start},
                   "model": loop_layouts.MODEL}, f)


if __name__ == "__main__":
    main()
