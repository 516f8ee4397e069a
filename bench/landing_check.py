#!/usr/bin/env python3
"""Landing speed check: the previous landing's binaries against this checkout's, alternated.

  bench/landing_check.py OLD_REV [--rounds N] [--keep-worktree] [--skip MOE|STEP]

Builds OLD_REV in a detached git worktree (build/landing_<sha> inside this checkout, so that
ccache's base_dir covers it and the build is mostly cache hits; `git worktree add --detach`,
then scripts/build.sh --target meshtrain bench_moe_layer) and this
checkout (its working tree, uncommitted changes included) the same way, then runs, round by
round, each benchmark on both sides, alternating which side goes first:
  step fp32 / step bf16   `meshtrain bench step` of 4 layers, dim 256, seq 128, batch 8,
                          12 steps, 1 thread (the median step_time_s of its metrics,
                          the first step left out as the warm-up);
  moe <prec> <side>       `tests/bench_moe_layer --cpu`: each side's median ms per round
                          (dense, layer, avx512, loop; fp32 and bf16).
It prints, per figure, min/median/max of each side over the rounds and the ratio new/old of
the medians, and flags a figure whose ratio lies beyond the rounds' spread:
  spread = the larger of the two sides' (max - min) / median;
  slower when new/old > 1 + spread, faster when new/old < 1 - spread.
A slowdown inside the spread is not flagged: the machine's own noise could make it, and more
rounds (or a quieter machine) narrow the spread. Exit status: 0 no figure slower, 1 a figure
slower (or a side failed to build or run), 2 bad arguments. The figures are times: lower
is faster. Run it on a quiet machine (docs/performance.md "Landing speed check"); on a
loaded one the spread widens and little is flagged, which is the honest outcome.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ["meshtrain", "bench_moe_layer"]
STEP_FLAGS = ["bench", "step", "--layers", "4", "--dim", "256", "--heads", "8", "--seq", "128",
              "--batch", "8", "--steps", "12", "--threads", "1"]
MOE_ROW = re.compile(r"^\s+(fp32|bf16)\s+(\S+)\s+([0-9.]+)\s", re.M)


def parse_args(argv):
    """The options; argparse exits 2 with a usage line on bad ones."""
    p = argparse.ArgumentParser(
        prog="landing_check.py",
        description="alternated speed check of OLD_REV's binaries against this checkout's")
    p.add_argument("old_rev", metavar="OLD_REV", help="the previous landing (any git revision)")
    p.add_argument("--rounds", type=int, default=5,
                   help="rounds of every benchmark on both sides (at least 2; default 5)")
    p.add_argument("--keep-worktree", action="store_true",
                   help="leave OLD_REV's worktree and build for the next call")
    p.add_argument("--skip", choices=["step", "moe"], action="append", default=[],
                   help="leave a benchmark out (repeatable)")
    a = p.parse_args(argv)
    if a.rounds < 2:
        p.error(f"--rounds {a.rounds}: at least 2 (a spread needs two rounds)")
    if len(a.skip) == 2:
        p.error("--skip step --skip moe leaves nothing to run")
    return a


def summary(values):
    """(min, median, max) of one side's rounds."""
    return min(values), statistics.median(values), max(values)


def spread(values):
    """(max - min) / median: how far the rounds of one side disagree."""
    lo, mid, hi = summary(values)
    return (hi - lo) / mid if mid > 0 else float("inf")


def verdict(old, new):
    """(ratio new/old of the medians, the spread, "slower" | "faster" | "within spread")."""
    ratio = summary(new)[1] / summary(old)[1]
    s = max(spread(old), spread(new))
    if ratio > 1 + s:
        return ratio, s, "slower"
    if ratio < 1 - s:
        return ratio, s, "faster"
    return ratio, s, "within spread"


def step_time(metrics_path):
    """Median step_time_s of a run's step records, the first (warm-up) step left out."""
    times = []
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if "step" in rec and "step_time_s" in rec and "event" not in rec:
                times.append(rec["step_time_s"])
    if len(times) < 2:
        raise ValueError(f"{metrics_path}: {len(times)} step records, need 2 or more")
    return statistics.median(times[1:])


def moe_figures(stdout):
    """{"moe fp32 layer": ms, ...} from bench_moe_layer's table."""
    return {f"moe {p} {side}": float(ms) for p, side, ms in MOE_ROW.findall(stdout)}


def run(cmd, cwd=None):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}: " + " | ".join(tail))
    return r.stdout


def build(tree):
    """Builds the two targets in tree/build; returns (meshtrain, bench_moe_layer) paths."""
    print(f"building {' '.join(TARGETS)} in {tree}", flush=True)
    run([os.path.join(tree, "scripts", "build.sh"), "--target"] + TARGETS, cwd=tree)
    return (os.path.join(tree, "build", "meshtrain"),
            os.path.join(tree, "build", "tests", "bench_moe_layer"))


def bench_once(binaries, skip, scratch):
    """One round of every benchmark on one side: {figure: seconds or ms}."""
    meshtrain, moe = binaries
    out = {}
    if "step" not in skip:
        for prec in ("fp32", "bf16"):
            metrics = os.path.join(scratch, f"step_{prec}.jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            run([meshtrain] + STEP_FLAGS + ["--precision", prec, "--metrics", metrics])
            out[f"step {prec} (ms/step)"] = step_time(metrics) * 1e3
    if "moe" not in skip:
        out.update({f"{k} (ms)": v for k, v in moe_figures(run([moe, "--cpu"])).items()})
    return out


def alternate(sides, rounds, skip, scratch):
    """{side: {figure: [per round]}}, the first side alternating round by round."""
    got = {name: {} for name in sides}
    names = list(sides)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            for fig, v in bench_once(sides[name], skip, scratch).items():
                got[name].setdefault(fig, []).append(v)
        print(f"round {r + 1}/{rounds} done ({' then '.join(order)})", flush=True)
    return got


def report(got):
    """The table; returns the figures flagged slower."""
    slower = []
    print(f"{'figure':<28} {'old min/median/max':>26} {'new min/median/max':>26} "
          f"{'new/old':>8} {'spread':>7}  verdict")
    for fig in sorted(set(got["old"]) & set(got["new"])):
        old, new = got["old"][fig], got["new"][fig]
        ratio, s, v = verdict(old, new)
        cells = ["/".join(f"{x:.2f}" for x in summary(side)) for side in (old, new)]
        print(f"{fig:<28} {cells[0]:>26} {cells[1]:>26} {ratio:8.3f} {s:7.1%}  {v}")
        if v == "slower":
            slower.append(fig)
    for fig in sorted(set(got["old"]) ^ set(got["new"])):
        print(f"{fig}: measured on one side only (a side added or removed it)")
    return slower


def resolve(rev):
    r = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", "--quiet", rev + "^{commit}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        print(f"landing_check.py: error: OLD_REV {rev} is not a commit of this repository",
              file=sys.stderr)
        sys.exit(2)
    return r.stdout.strip()


def main(argv):
    a = parse_args(argv)
    sha = resolve(a.old_rev)
    # Under the checkout's (ignored) build folder: a path outside ccache's base_dir misses
    # the cache on every file (a full build of OLD_REV under /tmp took over ten minutes).
    tree = os.path.join(REPO, "build", f"landing_{sha[:12]}")
    os.makedirs(os.path.dirname(tree), exist_ok=True)
    # A SIGTERM (a timeout's kill) unwinds like Ctrl-C, so the worktree is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if not os.path.isdir(tree):
            run(["git", "-C", REPO, "worktree", "add", "--detach", tree, sha])
        sides = {"old": build(tree), "new": build(REPO)}
        with tempfile.TemporaryDirectory() as scratch:
            got = alternate(sides, a.rounds, a.skip, scratch)
    except RuntimeError as e:
        print(f"landing_check.py: {e}", file=sys.stderr)
        return 1
    finally:
        if not a.keep_worktree and os.path.isdir(tree):
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree],
                           capture_output=True)
    print(f"old {sha[:12]} ({a.old_rev}) against new (this checkout), {a.rounds} rounds")
    slower = report(got)
    if slower:
        print(f"SLOWER beyond the rounds' spread: {', '.join(slower)}")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
