"""Where 4 rank threads share 2 cores: the step under `--bind none` (the scheduler places the
ranks, the default before stop 43) against `--bind auto` (one-thread ranks that outnumber the
cores round robin, rank r on core r mod n), alternated.

Usage: python3 bench/planner/bind_compare.py build/meshtrain [--rounds 5] [--steps 12]
       [--only NAME,NAME] [--modes none,auto]

Each round runs every (layout, mode) once, in an order rotated each round, so that a drift of
the host hits both modes alike. Per layout: each mode's median step (the engine's
step_time_s after 2 warm-up steps, median over the run; then the median over rounds), the
per-round ratio auto / none, and the sleeps per step of the rank thread that slept most
(voluntary context switches, sampled from /proc while the run lasts): a rank that sleeps
about once per collective is one of the two early ranks of the stuck state (docs/planner.md,
stop 43); in the paired state every rank sleeps far less."""
import json
import os
import statistics
import subprocess
import sys
import time

import loop_layouts as lay

_LLAMA = dict(dp=1, tp=1, pp=1, zero=0, recompute="none", v=1, arch="llama")
# The closed loop's 4-rank rows on 2 cores, and the brute force's finalists of stop 42 that
# the planner predicts equal (tp2 pp2 m4 under 1f1b and gpipe measured 73.7 and 64.7 ms).
LAYOUTS = {n: lay.resolve(k) for n, r, k in lay.LAYOUTS if r == 4}
LAYOUTS.update({
    "llama tp2 pp2 sp 1f1b mb4": dict(_LLAMA, tp=2, pp=2, sp=True, mb=4, schedule="1f1b"),
    "llama tp2 pp2 sp gpipe mb4": dict(_LLAMA, tp=2, pp=2, sp=True, mb=4, schedule="gpipe"),
    "llama tp2 pp2 sp zb-h1 mb1": dict(_LLAMA, tp=2, pp=2, sp=True, mb=1, schedule="zb-h1"),
})


def arg(name, default, conv=str):
    return conv(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def rank_sleeps(pid):
    """Voluntary context switches of each `mt rank N` thread of process pid, by name."""
    out = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                name = f.read().strip()
            if not name.startswith("mt rank"):
                continue
            with open(f"/proc/{pid}/task/{t}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        out[name] = int(line.split()[1])
        except OSError:
            continue
    return out


def run(binary, k, mode, steps, metrics):
    """Median step (s) after 2 warm-up steps, and the most sleeps of one rank per step."""
    if os.path.exists(metrics):
        os.remove(metrics)
    p = subprocess.Popen([binary, "train", "--steps", str(steps), "--quiet", "--metrics", metrics,
                          "--lr-schedule", "constant", "--peak-gflops", "100", "--bind", mode]
                         + lay.MODEL + lay.knob_args(k, False),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    sleeps = {}
    while p.poll() is None:  # a sample every 50 ms: next to nothing beside the ranks
        time.sleep(0.05)
        sleeps.update(rank_sleeps(p.pid))
    err = p.communicate()[1]
    if p.returncode != 0:
        raise SystemExit(err)
    with open(metrics) as f:
        times = [json.loads(l)["step_time_s"] for l in f if '"step_time_s"' in l]
    return statistics.median(times[2:]), max(sleeps.values(), default=0) / steps


def main():
    binary = sys.argv[1]
    rounds, steps = arg("--rounds", 5, int), arg("--steps", 12, int)
    modes = arg("--modes", "none,auto").split(",")
    names = arg("--only", ",".join(LAYOUTS)).split(",")
    metrics = f"/tmp/bind_compare_{os.getpid()}.jsonl"
    combos = [(n, m) for n in names for m in modes]
    walls = {c: [] for c in combos}
    sleeps = {c: [] for c in combos}
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    for r in range(rounds):
        for n, m in combos[r % len(combos):] + combos[:r % len(combos)]:
            w, s = run(binary, LAYOUTS[n], m, steps, metrics)
            walls[(n, m)].append(w)
            sleeps[(n, m)].append(s)
            print(f"round {r + 1}/{rounds} {n:28s} --bind {m:5s} {w * 1e3:8.1f} ms  most sleeps "
                  f"of a rank {s:6.0f} per step  load {os.getloadavg()[0]:.1f}", flush=True)
    for n in names:
        line = "  ".join(f"{m} {statistics.median(walls[(n, m)]) * 1e3:.1f} ms (sleeps "
                         f"{statistics.median(sleeps[(n, m)]):.0f}/step)" for m in modes)
        print(f"{n:28s} {line}")
        if len(modes) == 2:
            ratios = [b / a for a, b in zip(walls[(n, modes[0])], walls[(n, modes[1])])]
            print(f"{'':28s} {modes[1]} / {modes[0]} per round: "
                  f"{' '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    if os.path.exists(metrics):
        os.remove(metrics)


if __name__ == "__main__":
    main()
