#!/usr/bin/env python3
"""tp 2's step against dp 2's on this host, as interleaved pairs: the figure a stable tp
probe would measure (docs/planner.md, stop 47). No profile is written.

Usage: python3 bench/planner/tp_ratio_probe.py build/meshtrain [--pairs 16] [--steps 8]

Each pair runs `meshtrain train` of the calibration's reference model (4L d256 T128 vocab
256, batch 8, fp32, one thread per rank, one microbatch) under dp 2 (ZeRO 0) and under
tp 2 back to back, the order alternating from pair to pair, and a one-rank run after them;
each run's figure is the median step_time_s of its steps after the first two (as the
calibration's reference steps). Printed: each pair's tp 2 / dp 2 ratio, and their median
and spread (the figure and how far one calibration's few pairs could move it); beside it
tp 2 / one rank, which a figure fitted to tp 2's absolute step (stop 46's
parallel_efficiency_tp, against a one-rank step measured at another minute) inherits, with
the host's drift between the runs.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODEL = ["--layers", "4", "--dim", "256", "--heads", "8", "--seq", "128", "--vocab", "256",
         "--batch", "8", "--threads", "1", "--lr-schedule", "constant", "--peak-gflops", "100",
         "--quiet", "--precision", "fp32", "--microbatches", "1"]
GRIDS = {"dp2": ["--dp", "2"], "tp2": ["--tp", "2"], "one": ["--dp", "1"]}


def arg(name, default, kind=int):
    return kind(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def step_ms(binary, grid, steps, skip=2):
    """One run: the median step_time_s (ms) after the first `skip` steps, with all of them."""
    with tempfile.TemporaryDirectory() as d:
        metrics = os.path.join(d, "m.jsonl")
        subprocess.run([binary, "train", *MODEL, *GRIDS[grid], "--steps", str(steps),
                        "--metrics", metrics], cwd=d, capture_output=True, check=True)
        with open(metrics) as f:
            times = [j["step_time_s"] * 1e3 for j in map(json.loads, f) if "step_time_s" in j]
    return statistics.median(times[skip:]), times


def quartiles(values):
    v = sorted(values)
    return v[len(v) // 4], v[(3 * len(v)) // 4]


def main():
    binary = os.path.abspath(sys.argv[1])  # the runs start in a scratch directory
    pairs, steps = arg("--pairs", 16), arg("--steps", 8)
    ratios, absolute = [], []
    for i in range(pairs):
        order = ("dp2", "tp2") if i % 2 == 0 else ("tp2", "dp2")
        load = os.getloadavg()[0]
        got = {g: step_ms(binary, g, steps) for g in order}
        got["one"] = step_ms(binary, "one", steps)
        ratio = got["tp2"][0] / got["dp2"][0]
        ratios.append(ratio)
        absolute.append(got["tp2"][0] / got["one"][0])
        print(f"pair {i + 1}/{pairs} load {load:.1f}: dp2 {got['dp2'][0]:.1f} ms, tp2 "
              f"{got['tp2'][0]:.1f} ms, one rank {got['one'][0]:.1f} ms; tp2 / dp2 {ratio:.3f}, "
              f"tp2 / one rank {absolute[-1]:.3f}  (tp2 steps "
              f"{' '.join(f'{t:.0f}' for t in got['tp2'][1])})", flush=True)
    for name, v in (("tp2 / dp2 (adjacent pairs)", ratios), ("tp2 / one rank", absolute)):
        lo, hi = quartiles(v)
        print(f"{name}: median {statistics.median(v):.3f}, quartiles {lo:.3f}-{hi:.3f}, range "
              f"{min(v):.3f}-{max(v):.3f} over {len(v)} pairs; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
