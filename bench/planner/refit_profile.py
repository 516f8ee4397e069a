#!/usr/bin/env python3
"""Re-derives a stored calibration's model-dependent figures for the binary's current model,
from what that calibration measured: no timing runs.

Usage: python3 bench/planner/refit_profile.py build/meshtrain PROFILE CALIBRATE_LOG OUT
       [--keep-halves]  (a binary of before stop 40: step 2 alone, the procedure's own check)

A profile's step factors (step_factor_*, microbatch_weight_s*) are fitted to the reference
steps against what the model of its day predicted for them; a change to the local model
(e.g. stop 40's GEMM formula) leaves them fitted to the old one, and replay_logs.py would
then judge the new model with the old model's correction. This script:
  1. re-solves the GEMM penalties (gemm_half_dim*, gemm_half_rows*) for the formula of
     stop 40 (both shares at once): the stored figures give back the two probes' measured
     rates under the formula they were solved for (one share, the smallest dimension's);
  2. re-fits the step factors per calibration round from the logged reference steps
     (`reference step (P), measured / kernels / fitted, ms: m1 a/b/c ...`), the kernels
     re-predicted by the binary with the profile's median kernel figures (the rounds' own
     kernel figures are not logged), as reference_steps.cpp's fit_step_factor does; the
     median over the rounds, then the factor scaled so that the profile predicts the median
     one-microbatch step (calibration_rounds.cpp's match_reference).
parallel_efficiency (bisected against a dp 2 step with the old fp32 factor) is kept.
"""
import re
import statistics
import subprocess
import sys

import loop_layouts as lay

W_PROBE, S_PROBE, R_PROBE = 1024.0, 64.0, 128.0
NO_ROW_PENALTY = 1e-3
WEIGHTS = 4 * 12.0 * 256 * 256 + 256.0 * 256  # the reference model's linear weights
REF = re.compile(r"^reference step \((?P<p>fp32|bf16)\), measured / kernels / fitted, ms:(?P<pts>.*?);")
PT = re.compile(r"m(?P<m>\d+) (?P<meas>[\d.]+)/")


def read(path):
    lines = open(path).read().splitlines()
    vals = {}
    for l in lines:
        m = re.match(r"^(\w+) = ([-+\d.eE]+)$", l)
        if m:
            vals[m[1]] = float(m[2])
    return lines, vals


def write(lines, vals, path):
    """The profile's lines, those of a changed figure rewritten (integers stay as written)."""
    out = []
    for l in lines:
        m = re.match(r"^(\w+) = ([-+\d.eE]+)$", l)
        out.append(f"{m[1]} = {vals[m[1]]:.9e}" if m and vals[m[1]] != float(m[2]) else l)
    open(path, "w").write("\n".join(out) + "\n")


def joint_halves(old_dim, old_rows):
    """The old formula priced the probes at peak / (1 + old_dim / 64) and peak / (1 +
    old_rows / 128); the new one's figures for the same rates (hardware_costs.cpp)."""
    k, m = old_dim / S_PROBE, old_rows / R_PROBE
    det = 1 / (W_PROBE * W_PROBE) - 1 / (S_PROBE * R_PROBE)
    rows = (k / W_PROBE - m / S_PROBE) / det
    dim = (m / W_PROBE - k / R_PROBE) / det
    if rows < 0:
        rows, dim = 0.0, S_PROBE * k
    if dim < 0:
        dim, rows = 0.0, R_PROBE * m
    return dim, max(rows, NO_ROW_PENALTY)


def predict(binary, profile, precision, microbatches):
    k = lay.resolve(dict(dp=1, tp=1, pp=1, mb_div=microbatches, precision=precision))
    p = subprocess.run([binary, "plan", "--hardware", "local", "--profile", profile, "--ranks", "1",
                        "--json", "--top", "1"] + lay.MODEL + lay.knob_args(k, True),
                       capture_output=True, text=True, check=True)
    import json
    return json.loads(p.stdout)["candidates"][0]["predicted"]["step_time_s"]


def fit(points):
    """fit_step_factor (reference_steps.cpp): least squares on the relative error."""
    aa = ab = bb = a1 = b1 = 0.0
    least = min(meas for _, _, meas in points)
    for m, kern, meas in points:
        a, b = kern / meas, m * WEIGHTS / meas
        aa, ab, bb, a1, b1 = aa + a * a, ab + a * b, bb + b * b, a1 + a, b1 + b
    floor = 1e-3 * least / (8 * WEIGHTS)
    det = aa * bb - ab * ab
    F, c = 0.0, -1.0
    if det > 1e-12 * aa * bb:
        F, c = (a1 * bb - b1 * ab) / det, (aa * b1 - ab * a1) / det
    if not c >= floor:
        c = floor
        F = sum((kern / meas) * (1 - m * WEIGHTS / meas * c) for m, kern, meas in points) / aa
    return min(max(F, 0.5), 3.0), c


def main():
    binary, profile, log, out = sys.argv[1:5]
    lines, vals = read(profile)
    for suffix in ("", "_bf16") if "--keep-halves" not in sys.argv else ():
        if vals.get("gemm_half_rows" + suffix, 0) > 0:
            vals["gemm_half_dim" + suffix], vals["gemm_half_rows" + suffix] = joint_halves(
                vals["gemm_half_dim" + suffix], vals["gemm_half_rows" + suffix])
    for prec, factor, per_mb, ref in (("fp32", "step_factor_fp32", "microbatch_weight_s",
                                       "reference_step_s"),
                                      ("bf16", "step_factor_bf16", "microbatch_weight_s_bf16",
                                       "reference_step_s_bf16")):
        rounds = [[(int(p["m"]), float(p["meas"]) * 1e-3) for p in PT.finditer(r["pts"])]
                  for r in map(REF.match, open(log)) if r and r["p"] == prec]
        if not rounds or vals.get(factor, 0) <= 0:
            continue
        bare = dict(vals, **{factor: 0.0, per_mb: 0.0})
        write(lines, bare, out)
        kernels = {m: predict(binary, out, prec, m) for m in (1, 2, 4, 8)}
        fits = [fit([(m, kernels[m], meas) for m, meas in r]) for r in rounds]
        vals[factor] = statistics.median(F for F, _ in fits)
        vals[per_mb] = statistics.median(c for _, c in fits)
        for _ in range(4):  # match_reference
            write(lines, vals, out)
            vals[factor] = min(max(vals[factor] * vals[ref] / predict(binary, out, prec, 1), 0.5),
                               3.0)
        print(f"{prec}: kernels m1/m2/m4/m8 " +
              " ".join(f"{kernels[m] * 1e3:.1f}" for m in (1, 2, 4, 8)) +
              f" ms; factor {vals[factor]:.3f}, per microbatch {vals[per_mb] * WEIGHTS * 1e3:.2f} ms")
    write(lines, vals, out)


if __name__ == "__main__":
    main()
