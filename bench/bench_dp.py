#!/usr/bin/env python3
"""Data-parallel weak scaling: dp=2 (one compute thread per rank) against dp=1 (one thread)
at half the global batch, so every rank does the work of the single worker. Prints the
median tokens/s of each (first steps skipped: allocation, first-touch), the speed-up
and the exposed dp communication per step (comm_exposed_s from the metrics), against the
goals: fp32 >= 1.85x and <= 10% of the step (the wave-1 data-parallel goal); bf16 >= 1.9x and
<= 3% (issue #33 item 4: the compute halves, the communication does not). Not a test: timings on a shared machine are noisy,
so it repeats the pair and reports the best and the median.

Each dp=2 try also says where its time went, so that a stalled try can be told apart:
  ranks F+B    each rank's median forward+backward (ms, from --trace): one rank much slower
               than the other while the other waits is the shape of a stall;
  same core    only with --bind none (bound ranks have a core each): the share of samples
               (every 50 ms, /proc/<pid>/task/<tid>/stat's processor field) in which both
               rank threads ("mt rank N") last ran on one core;
  steal        the share of the machine's CPU time the hypervisor took (/proc/stat), which
               no placement inside the guest can avoid;
  others       the share of the CPU time used by processes other than this one (its own
               from the run's rusage).
The runs being timed are not sampled otherwise: a sampler that wakes every 20 ms took ~2% of
a core (0.4 ms a wake), and on two cores with both ranks busy each wake takes a core from one
rank while the other waits for it, a cost dp=1 (one idle core) never pays (issue #33, stop 43).
Compare with --bind none (the operating system places the ranks) to see what the binding
does: bench/bench_dp.py build/meshtrain --repeat 5 -- --precision bf16 --bind none

--phases: where dp=2's step grows, per phase (issue #33, stop 44). Alternates `meshtrain
bench step --breakdown` (--phase-steps steps, the same model and per-rank batch) in three
forms: dp=1; two dp=1 processes at once, each held to a core of its own (both cores busy,
but the two never meet: their phases drift apart); dp=2. Prints the medians of each
phase's `cpu ms` (rank 0's thread CPU) and of the median step. A phase that grows from dp=1
to the two processes grows because both cores are busy (shared L3, memory bandwidth); one
that grows further at dp=2 grows because the meeting lines the ranks' phases up, so that
their memory-bound passes (AdamW above all) run at the same time; dp=2's "framework" also
holds the local all-reduce's own sums, which run on the rank's thread.

--zero: the ZeRO stage of the dp=2 runs (default 0), or a list of stages ("0,1"): each try
then runs dp=1 and dp=2 at every listed stage in turn (alternated in the same run), and the
summary gives each stage's speed-up on its own line; --phases gets a dp=2 column per stage.
At dp 2, ZeRO 1 and 2 halve each rank's AdamW pass (each rank updates its half of the
parameters, then the two halves are all-gathered), the pass that the two ranks stream at
the same moment on the shared memory path (issue #33, stop 46). Every line names its stage:
ZeRO 0 and ZeRO 1 are separate figures, not one goal met two ways.

  bench/bench_dp.py BUILD/meshtrain [--repeat 3] [--zero 0[,1,2]] [--phases] [-- extra flags]
  (weak scaling in bf16, issue #33: bench/bench_dp.py build/meshtrain --repeat 5 -- --precision bf16)
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MODEL = "--layers 4 --dim 256 --heads 4 --seq 128 --lr-schedule constant --quiet"


def cpu_times():
    """(total, steal, idle) jiffies of the machine, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]), v[7], v[3] + v[4]


def rank_tids(pid):
    """{tid: name} of the running process's rank threads ("mt rank N")."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # the thread ended between the listing and the read
        if name.startswith("mt rank"):
            out[tid] = name
    return out


def last_core(pid, tid):
    """The core the thread last ran on (/proc/<pid>/task/<tid>/stat's processor field)."""
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def count_same_core(p, interval=0.05):
    """Samples, while p runs, whether its rank threads last ran on one core: (together,
    samples). The rank threads are listed once, then only their stat files are read."""
    together = samples = 0
    tids = {}
    while p.poll() is None:
        time.sleep(interval)
        try:
            if len(tids) < 2:
                tids = rank_tids(p.pid)
                continue
            cores = [last_core(p.pid, t) for t in tids]
        except (OSError, ValueError, IndexError):
            continue  # the process or a thread ended between two reads
        samples += 1
        together += len(set(cores)) < len(cores)
    return together, samples


def run_observed(cmd, sample_cores):
    """Runs cmd; returns the scheduler evidence. Sampled only for the same-core share, and
    only when asked (unbound ranks): see the module's comment."""
    total0, steal0, idle0 = cpu_times()
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    together, samples = count_same_core(p) if sample_cores else (0, 0)
    err = p.communicate()[1]
    total1, steal1, idle1 = cpu_times()
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{err[-2000:]}")
    span = max(total1 - total0, 1)
    # The run's own CPU time: the rusage of the children reaped meanwhile (only this one).
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = (children1.ru_utime - children0.ru_utime) + (children1.ru_stime - children0.ru_stime)
    used = seconds * os.sysconf("SC_CLK_TCK")  # in jiffies, as /proc/stat counts
    return {"same_core": together / samples if samples else None,
            "steal": (steal1 - steal0) / span,
            "others": max(0.0, (span - (idle1 - idle0) - (steal1 - steal0) - used) / span)}


def rank_compute_ms(trace):
    """Each rank's median forward+backward time (ms) after the first 3 steps."""
    with open(trace) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    per = {}
    for e in ev:
        if e.get("name", "").startswith("F+B") and "dur" in e:
            per.setdefault(e["tid"], []).append(e["dur"] / 1000)
    return [statistics.median(v[3:] or v) for _, v in sorted(per.items())]


def run(binary, flags, tmp, steps, sample=False):
    metrics = os.path.join(tmp, "m.jsonl")
    trace = os.path.join(tmp, "t.json")
    cmd = ([binary, "train"] + MODEL.split() + ["--steps", str(steps)] + flags +
           ["--metrics", metrics])
    evidence = {}
    if sample:
        unbound = "none" in flags or "--bind=none" in flags
        evidence = run_observed(cmd + ["--trace", trace], unbound)
        evidence["ranks_ms"] = rank_compute_ms(trace)
    else:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    rows = [json.loads(l) for l in open(metrics)]
    rows = [r for r in rows if "step" in r][3:]
    tps = statistics.median(r["tokens_per_s"] for r in rows)
    exposed = statistics.median(r.get("comm_exposed_s", 0) / r["step_time_s"] for r in rows)
    return tps, exposed, " ".join(cmd[1:]), evidence


PHASES = ["gemm", "attention", "norm", "activation", "optimizer", "conversion", "embedding",
          "framework"]


def breakdown(text):
    """{phase: cpu ms, "thread cpu": ms, "step": rank 0's median step ms, "wait": its median
    comm wait} from a `bench step --breakdown` output."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 7 and f[0] in PHASES and f[2].endswith("%") and f[5] != "-":
            out[f[0]] = float(f[5])
        elif line.strip().startswith("rank thread cpu"):
            out["thread cpu"] = float(f[3])
        elif line.strip().startswith("rank 0: step"):
            tail = line.split("median step")[1].split(",")
            out["step"] = float(tail[0])
            out["wait"] = float(tail[1].split()[-1])
    return out


def phase_run(binary, dp, batch, extra, steps, core=None, zero=0):
    """Starts one breakdown run (held to `core` when given); returns the process."""
    cmd = ([binary, "bench", "step", "--breakdown"] + MODEL.split() +
           ["--steps", str(steps), "--dp", str(dp), "--threads", "1", "--batch", str(batch),
            "--zero", str(zero)] + extra)
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=pin)


def phases(a):
    """--phases: the three forms alternated a.repeat times; medians per phase."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        sys.exit("bench_dp: --phases needs two cores")
    forms = {"dp=1": [], "2 x dp=1": []}
    for z in a.zeros:  # one dp=2 column per ZeRO stage
        forms[f"dp=2 z{z}"] = []
    for _ in range(a.repeat):
        for form, runs in forms.items():
            if form == "2 x dp=1":
                ps = [phase_run(a.binary, 1, a.batch // 2, a.extra, a.phase_steps, c)
                      for c in cores[:2]]
            elif form == "dp=1":
                ps = [phase_run(a.binary, 1, a.batch // 2, a.extra, a.phase_steps)]
            else:
                z = int(form.split("z")[1])
                ps = [phase_run(a.binary, 2, a.batch, a.extra, a.phase_steps, zero=z)]
            for p in ps:
                out, err = p.communicate()
                if p.returncode != 0:
                    sys.exit(f"failed ({p.returncode}): {' '.join(p.args)}\n{err[-2000:]}")
                runs.append(breakdown(out))
    print(f"cpu ms per step of rank 0 by phase, medians of {a.repeat} alternated runs "
          f"({a.phase_steps} steps each; load average {os.getloadavg()[0]:.1f} at the end)")
    print("  (dp=2 zN: dp=2 at ZeRO stage N; the last columns: each dp=2 column minus dp=1)")
    print(f"  {'phase':12s}" + "".join(f"{f:>10s}" for f in forms) +
          "".join(f"{'-dp=1 z' + str(z):>10s}" for z in a.zeros))
    for key in PHASES + ["thread cpu", "step", "wait"]:
        med = [statistics.median(r.get(key, 0.0) for r in runs) for runs in forms.values()]
        print(f"  {key:12s}" + "".join(f"{m:10.3f}" for m in med) +
              "".join(f"{m - med[0]:+10.3f}" for m in med[2:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--zero", default="0",
                    help="ZeRO stage of the dp=2 runs, or a comma list (alternated per try)")
    ap.add_argument("--batch", type=int, default=8, help="global batch of the dp=2 run")
    ap.add_argument("--steps", type=int, default=12, help="steps per run (the first 3 are skipped)")
    ap.add_argument("--phases", action="store_true",
                    help="per-phase cpu of dp=1, two dp=1 processes at once and dp=2")
    ap.add_argument("--phase-steps", type=int, default=30, help="steps per --phases run")
    ap.add_argument("extra", nargs="*")
    # Flags for meshtrain may follow "--" (e.g. -- --precision bf16), which argparse leaves
    # unparsed after the positionals.
    a, rest = ap.parse_known_args()
    a.extra += [x for x in rest if x != "--"]
    a.zeros = [int(z) for z in a.zero.split(",")]
    if any(z not in (0, 1, 2, 3) for z in a.zeros):
        sys.exit(f"bench_dp: --zero {a.zero}: stages are 0-3")
    if a.phases:
        return phases(a)
    bf16 = "bf16" in a.extra
    goal_x, goal_exposed = (1.9, 0.03) if bf16 else (1.85, 0.10)
    speedups = {z: [] for z in a.zeros}
    exposures = {z: [] for z in a.zeros}
    cmds = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeat):
            one, _, cmd1, _ = run(a.binary, ["--dp", "1", "--threads", "1", "--batch",
                                          str(a.batch // 2)] + a.extra, tmp, a.steps)
            for z in a.zeros:
                two, exp2, cmd2, ev = run(a.binary, ["--dp", "2", "--threads", "1", "--batch",
                                                     str(a.batch), "--zero", str(z)] + a.extra,
                                          tmp, a.steps, sample=True)
                speedups[z].append(two / one)
                exposures[z].append(exp2)
                if i == 0:
                    cmds.append(cmd2)
                ranks = "/".join(f"{x:.1f}" for x in ev["ranks_ms"])
                same = "bound" if ev["same_core"] is None else f"{ev['same_core']:.0%}"
                print(f"try {i + 1}: dp=1 {one:8.0f} tok/s | dp=2 ZeRO {z} {two:8.0f} tok/s | "
                      f"speed-up {two / one:.2f}x | exposed comm {exp2:.1%} of the step | "
                      f"ranks F+B {ranks} ms, same core {same}, "
                      f"steal {ev['steal']:.1%}, others {ev['others']:.0%}")
    print("commands:\n  " + "\n  ".join([cmd1] + cmds))
    for z in a.zeros:
        sp, ex = speedups[z], exposures[z]
        print(f"dp=2 ZeRO {z}: speed-up: best {max(sp):.2f}x, median {statistics.median(sp):.2f}x "
              f"(goal >= {goal_x}x); exposed comm: best {min(ex):.1%}, median "
              f"{statistics.median(ex):.1%} of the step (goal <= {goal_exposed:.0%})")


if __name__ == "__main__":
    sys.exit(main())
