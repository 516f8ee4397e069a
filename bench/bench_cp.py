#!/usr/bin/env python3
"""Context-parallel benchmark (issue #29, docs/context_parallel.md). Not a test: run it on a
quiet machine (timings on a shared machine mean nothing).

  bench/bench_cp.py BUILD/meshtrain [--steps 6] [--seqs 2048,4096,8192] [-- extra flags]

Two tables from one run each:
  memory  activation peak per rank (the run's memory record) at cp 1, 2, 4 for each --seq,
          and its ratio to cp 1 (goal at T = 4096: cp 4 <= 0.35x);
  speed   median step time at cp 1 and cp 2/4 with --cp-comm ring and allgather, for a
          model with few kv heads (GQA, kv 2) and one with many (kv = heads = 16), the
          ratio to the ideal (cp 1's step time / cp), so > 1 is the cost of splitting, and
          cp_comm_wait_s: the seconds a step sat blocked on the cp group (the exposed part of
          the K/V transfers).
The local backend runs the cp ranks as threads: give the machine cp x --threads cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

MODEL = "--arch llama --layers 2 --dim 256 --heads 16 --ffn-dim 512 --batch 1 --lr-schedule constant --quiet"


def run(binary, flags, tmp, steps):
    metrics = os.path.join(tmp, "m.jsonl")
    cmd = [binary, "train"] + MODEL.split() + ["--steps", str(steps)] + flags + ["--metrics", metrics]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    recs = [json.loads(line) for line in open(metrics)]
    steps_ = [r for r in recs if "step" in r]
    timed = steps_[2:] or steps_
    mem = [r for r in recs if r.get("event") == "memory"]
    return {"step_s": statistics.median(r["step_time_s"] for r in timed),
            "wait_s": statistics.median(r.get("cp_comm_wait_s", 0.0) for r in timed),
            "act": max((r["activations_peak_bytes"] for r in mem), default=0),
            "cmd": " ".join(cmd[1:])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seqs", default="2048,4096,8192")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    seqs = [int(s) for s in a.seqs.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        print("memory: activation peak per rank (MiB), ratio to cp 1")
        print(f"{'seq':>6} {'cp 1':>10} {'cp 2':>16} {'cp 4':>16}")
        for T in seqs:
            base = ["--seq", str(T), "--kv-heads", "2"] + a.extra
            acts = [run(a.binary, base + ["--cp", str(cp)], tmp, 2)["act"] for cp in (1, 2, 4)]
            cells = [f"{acts[i] / 2**20:8.1f} ({acts[i] / acts[0]:.2f}x)" for i in (1, 2)]
            print(f"{T:>6} {acts[0] / 2**20:>10.1f} {cells[0]:>16} {cells[1]:>16}")
        print("\nspeed: median step time (s); in brackets step / (cp 1 step / cp), then the "
              "seconds per step blocked on the cp group (transfer not hidden)")
        print(f"{'seq':>6} {'kv':>3} {'cp 1':>8} {'cp':>3} {'ring':>24} {'allgather':>24}")
        for T in seqs:
            for kv in (2, 16):
                base = ["--seq", str(T), "--kv-heads", str(kv)] + a.extra
                one = run(a.binary, base, tmp, a.steps)["step_s"]
                for cp in (2, 4):
                    cells = []
                    for comm in ("ring", "allgather"):
                        r = run(a.binary, base + ["--cp", str(cp), "--cp-comm", comm], tmp,
                                a.steps)
                        t = r["step_s"]
                        cells.append(f"{t:7.3f} ({t / (one / cp):.2f}x) {r['wait_s']:6.3f}")
                    print(f"{T:>6} {kv:>3} {one:>8.3f} {cp:>3} {cells[0]:>24} {cells[1]:>24}")


if __name__ == "__main__":
    main()
