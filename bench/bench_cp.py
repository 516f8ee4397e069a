#!/usr/bin/env python3
"""Context-parallel benchmark (issue #29, docs/context_parallel.md). Not a test: run it on a
quiet machine (timings on a shared machine mean nothing).

  bench/bench_cp.py BUILD/meshtrain [--steps 6] [--mem-seq 4096] [--seqs 2048,8192,32768]
                    [--kv 2,16] [--threads 1] [--tiny] [-- extra train flags]

Three tables, every ratio from runs of one invocation:
  memory  activation peak per rank (the run's memory record) at cp 1, 2, 4 at --mem-seq, and
          the ratio to cp 1 (goal at T = 4096: cp 4 <= 0.35x);
  ideal   cp 2 ring at --mem-seq: the median step time against the ideal, cp 1's step time
          split in two except the work that does not shrink with the sequence (the optimizer
          and the gradient reduction: the trace's "optimizer" and "wait grad buckets" spans of
          cp 1), and the fraction of each K/V transfer hidden behind the attention: 1 -
          wait / transfer, per ring step, where wait is the step's "cp ring ... wait" span and
          transfer the block's bytes over the link bandwidth `meshtrain bench comm` measures
          for that size (the backward's steps move K/V and dK/dV: twice the bytes);
  speed   ring vs all-gather at cp 2 and cp 4 for each --seqs and each --kv (few kv heads:
          GQA; kv = heads: many), the median step time and, in brackets, its ratio to cp 1's
          time / cp, then the seconds per step blocked on the cp group.
The local backend runs the cp ranks as threads: give the machine cp x --threads cores.
--tiny: a smoke test at small sizes (seconds; the numbers mean nothing).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

MODEL = "--arch llama --layers 2 --dim 256 --heads 16 --ffn-dim 512 --batch 1 --lr-schedule constant --quiet"
TINY = "--arch llama --layers 1 --dim 64 --heads 8 --ffn-dim 96 --batch 1 --lr-schedule constant --quiet"


def run(a, flags, tmp, steps, trace=False):
    metrics = os.path.join(tmp, "m.jsonl")
    cmd = [a.binary, "train"] + a.model.split() + ["--threads", str(a.threads), "--steps", str(steps)]
    cmd += flags + ["--metrics", metrics]
    if trace:
        cmd += ["--trace", os.path.join(tmp, "t.json")]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    recs = [json.loads(line) for line in open(metrics)]
    steps_ = [r for r in recs if "step" in r]
    timed = steps_[2:] or steps_
    mem = [r for r in recs if r.get("event") == "memory"]
    out = {"step_s": statistics.median(r["step_time_s"] for r in timed),
           "wait_s": statistics.median(r.get("cp_comm_wait_s", 0.0) for r in timed),
           "act": max((r["activations_peak_bytes"] for r in mem), default=0),
           "steps": len(steps_), "cmd": " ".join(cmd[1:])}
    if trace:
        out["spans"] = [e for e in json.load(open(os.path.join(tmp, "t.json")))["traceEvents"]
                        if e.get("ph") == "X"]
    return out


def link_seconds(a, nbytes):
    """Seconds the local link takes for one message of nbytes (bench comm's all-gather at
    that size, 2 ranks: each rank receives nbytes / 2 per call)."""
    size = max(64, nbytes * 2 // 64 * 64)
    out = subprocess.run([a.binary, "bench", "comm", "--op", "all_gather", "--ranks", "2",
                          "--min-bytes", str(size), "--max-bytes", str(size), "--iters", "5",
                          "--repeats", "3"], check=True, capture_output=True, text=True).stdout
    row = [l for l in out.splitlines() if l.strip() and not l.startswith("#")][-1].split()
    return float(row[2]) * 1e-6


def fixed_seconds(r):
    """Per step, rank 0's work that does not shrink with cp: optimizer + gradient reduction."""
    names = ("optimizer", "wait grad buckets")
    total = sum(e["dur"] for e in r["spans"] if e["tid"] == 0 and e["name"] in names) * 1e-6
    return total / r["steps"]


def hidden_fraction(r, block_bytes, link):
    """Mean over ring transfers of 1 - wait / transfer (see the module comment)."""
    fracs = []
    for e in r["spans"]:
        m = re.match(r"cp ring ([FB])(\d+) K/V of cp", e["name"])
        if not m:
            continue
        wait = next((w["dur"] * 1e-6 for w in r["spans"] if w["tid"] == e["tid"]
                     and w["name"] == f"cp ring {m[1]}{m[2]} wait"
                     and abs(w["ts"] - (e["ts"] + e["dur"])) < 1.0), 0.0)
        transfer = link * (2 if m[1] == "B" else 1)
        fracs.append(1 - min(wait, transfer) / transfer)
    return statistics.mean(fracs) if fracs else float("nan")


def memory_table(a, tmp):
    T = a.mem_seq
    print(f"memory: activation peak per rank (MiB) at T = {T}, ratio to cp 1 (goal: cp 4 <= 0.35x)")
    base = ["--seq", str(T), "--kv-heads", "2"] + a.extra
    acts = [run(a, base + ["--cp", str(cp)], tmp, 2)["act"] for cp in (1, 2, 4)]
    cells = [f"{acts[i] / 2**20:.1f} ({acts[i] / acts[0]:.2f}x)" for i in (1, 2)]
    print(f"  cp 1 {acts[0] / 2**20:.1f}   cp 2 {cells[0]}   cp 4 {cells[1]}\n")


def ideal_table(a, tmp):
    T, kv = a.mem_seq, 2
    base = ["--seq", str(T), "--kv-heads", str(kv)] + a.extra
    one = run(a, base, tmp, a.steps, trace=True)
    two = run(a, base + ["--cp", "2"], tmp, a.steps, trace=True)
    fixed = fixed_seconds(one)
    ideal = (one["step_s"] - fixed) / 2 + fixed
    hd = 256 // 16 if a.model == MODEL else 64 // 8
    block = 1 * (T // 2) * 2 * kv * hd * 4  # b x T/cp rows x [K | V] of the kv heads, fp32
    link = link_seconds(a, block)
    print(f"ideal: cp 2 ring at T = {T}, kv {kv} (goal: step <= 1.15x ideal)")
    print(f"  cp 1 step {one['step_s']:.4f} s (of which {fixed:.4f} s does not shrink); "
          f"ideal cp 2 {ideal:.4f} s; cp 2 step {two['step_s']:.4f} s = "
          f"{two['step_s'] / ideal:.2f}x ideal")
    print(f"  K/V block {block} B, {link * 1e6:.1f} us over the link; hidden per transfer: "
          f"{hidden_fraction(two, block, link):.2f}; blocked on cp {two['wait_s']:.4f} s/step\n")


def speed_table(a, tmp):
    print("speed: median step time (s); in brackets step / (cp 1 step / cp), then the "
          "seconds per step blocked on the cp group (transfer not hidden)")
    print(f"{'seq':>6} {'kv':>3} {'cp 1':>8} {'cp':>3} {'ring':>24} {'allgather':>24}")
    for T in a.seqs:
        for kv in a.kv:
            base = ["--seq", str(T), "--kv-heads", str(kv)] + a.extra
            one = run(a, base, tmp, a.steps)["step_s"]
            for cp in (2, 4):
                cells = []
                for comm in ("ring", "allgather"):
                    r = run(a, base + ["--cp", str(cp), "--cp-comm", comm], tmp, a.steps)
                    t = r["step_s"]
                    cells.append(f"{t:7.3f} ({t / (one / cp):.2f}x) {r['wait_s']:6.3f}")
                print(f"{T:>6} {kv:>3} {one:>8.3f} {cp:>3} {cells[0]:>24} {cells[1]:>24}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--mem-seq", type=int, default=4096)
    ap.add_argument("--seqs", default="2048,8192,32768")
    ap.add_argument("--kv", default="2,16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    a.model = MODEL
    if a.tiny:
        a.model, a.mem_seq, a.seqs, a.kv, a.steps = TINY, 64, "64,128", "2,8", 3
    a.seqs = [int(s) for s in a.seqs.split(",")]
    a.kv = [int(k) for k in a.kv.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        memory_table(a, tmp)
        ideal_table(a, tmp)
        speed_table(a, tmp)


if __name__ == "__main__":
    main()
