#!/usr/bin/env python3
"""How far `microbatch_weight_s` (the calibration's per-microbatch cost, reference_steps.cpp)
moves between readings on this machine, and the same figure taken in a way that cancels the
host's drift.

Usage: python3 bench/planner/microbatch_probe.py build/meshtrain PROFILE [--rounds 6]
       [--precision fp32|bf16] [--out DIR]

The calibration runs the reference step (4L d256 T128 vocab 256, batch 8, one thread) once
in 1, 8, 2 and 4 microbatches, in that order, per round; it fits step = F x K(m) + m x W x c
(K: the profile's kernel prediction, W the linear weights) to the four, and keeps the
median c of its rounds. Here each round runs the calibration's order and then its reverse
(1 8 2 4 4 2 8 1) and prints three figures:
- c as the calibration reads it: the same fit on the round's first four runs (fit_step_factor);
- c from the bracket: the same fit on each count's mean over its two runs, which cancels a
  drift that is linear over the round;
- the reference beside it: the one-microbatch step's own spread over the rounds (the
  calibration's reference_step_s and step factor come from it).
The profile's field is printed beside them. K(m) comes from the binary with a copy of
PROFILE whose step factor and per-microbatch cost are 0, as the calibration computes it.
"""
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from loop_layouts import resolve  # noqa: E402
from loop_measure import measure, predict  # noqa: E402
import refit_profile  # noqa: E402

COUNTS = (1, 8, 2, 4)


def fit_step_factor(steps):
    """reference_steps.cpp's fit_step_factor, as refit_profile.py copies it: [(microbatches,
    kernels s, measured s)] -> (F, c), c floored at a small positive figure."""
    return refit_profile.fit(steps)


def zeroed_profile(profile, precision):
    """A copy of `profile` without the step factor and per-microbatch cost of `precision`."""
    keys = ("step_factor_bf16", "microbatch_weight_s_bf16") if precision == "bf16" else \
        ("step_factor_fp32", "microbatch_weight_s")
    lines = [l for l in open(profile) if l.split("=")[0].strip() not in keys]
    fd, path = tempfile.mkstemp(suffix=".toml")
    with os.fdopen(fd, "w") as f:
        f.writelines(lines)
    return path


def profile_field(profile, key):
    for line in open(profile):
        k, eq, v = line.partition("=")
        if eq and k.strip() == key:
            return float(v)
    return 0.0


def knobs(m, precision):
    return resolve(dict(dp=1, tp=1, pp=1, mb_div=m, precision=precision))


def round_figures(kernels, runs):
    """kernels: {m: K}; runs: [(m, seconds)] in the order they ran (the calibration's order,
    then its reverse). Returns (c from the first four, c from each count's mean)."""
    first = [(m, kernels[m], s) for m, s in runs[:len(COUNTS)]]
    means = {}
    for m, s in runs:
        means.setdefault(m, []).append(s)
    both = [(m, kernels[m], statistics.mean(v)) for m, v in means.items()]
    return fit_step_factor(first)[1], fit_step_factor(both)[1]


def spread(xs):
    return max(xs) / min(xs) - 1 if xs and min(xs) > 0 else float("nan")


def main():
    binary, profile = os.path.abspath(sys.argv[1]), sys.argv[2]
    arg = lambda name, d: sys.argv[sys.argv.index(name) + 1] if name in sys.argv else d
    rounds, precision = int(arg("--rounds", 6)), arg("--precision", "fp32")
    out = arg("--out", tempfile.mkdtemp(prefix="mbprobe-"))
    os.makedirs(out, exist_ok=True)
    bare = zeroed_profile(profile, precision)
    kernels = {m: predict(binary, bare, 1, knobs(m, precision)) for m in COUNTS}
    field = "microbatch_weight_s" + ("_bf16" if precision == "bf16" else "")
    print(f"kernels K(m), ms: " + " ".join(f"m{m} {kernels[m] * 1e3:.1f}" for m in COUNTS)
          + f"; the profile's {field} {profile_field(profile, field):.3g}")
    order = list(COUNTS) + list(COUNTS)[::-1]
    calib, bracket, one = [], [], []
    for r in range(rounds):
        runs = [(m, measure(binary, out, 1, knobs(m, precision), 8, extra=["--threads", "1"])[0])
                for m in order]
        c4, c8 = round_figures(kernels, runs)
        calib.append(c4)
        bracket.append(c8)
        one += [s for m, s in runs if m == 1]
        print(f"round {r + 1}: " + " ".join(f"m{m} {s * 1e3:.1f}" for m, s in runs)
              + f" ms; c as calibrated {c4:.3g}, from the bracket {c8:.3g}", flush=True)
    os.remove(bare)
    for label, cs in (("as the calibration reads it (first four runs)", calib),
                      ("from each round's bracket (1 8 2 4 4 2 8 1)", bracket)):
        print(f"{field} {label}: median {statistics.median(cs):.3g}, rounds "
              f"{min(cs):.3g} .. {max(cs):.3g} (x{max(cs) / max(min(cs), 1e-15):.1f})")
    print(f"the reference: the one-microbatch step over the rounds' runs: median "
          f"{statistics.median(one) * 1e3:.1f} ms, spread {spread(one):.1%}")


if __name__ == "__main__":
    main()
