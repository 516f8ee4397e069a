#!/usr/bin/env python3
"""Where the planner's step of each Megatron-Core H100 row (MC24) with pp 1 goes, and what the
GEMMs would have to run at for the GEMMs alone to explain the published time (a diagnosis,
never a fit: nothing here feeds a constant).

Usage: python3 bench/planner/mc24_decompose.py build/meshtrain

Each row is planned at its searched layout (micro-batch 4, 1F1B: the search's pick for all
four) through --hardware-file copies of the h100-80gb preset (published_runs.py's H100_TOML,
checked against the preset) in which one kind of cost after another is made free, in this
order: the memory-bound passes (HBM bandwidth 10^18 B/s: norms, residuals, GeLU, dropout,
the fp32 cross entropy, the grad buffer's passes, the optimizer), the communication (every
link 10^18 B/s, no latency, no SMs held by overlapped collectives), the fused attention
(its time is measured as what halving cuDNN's rate adds: the rate is a fraction of the peak
that cannot exceed 1), the per-kernel overhead (0). What is left is the GEMMs (waves and
all). The GEMM FLOPs are counted from the shapes (forward, input and weight gradients of
the four block linears and the untied head), so the model's average GEMM rate is FLOPs /
that time, and the rate that would close the gap is FLOPs / (that time + the gap).
"""
import json
import os
import subprocess
import sys
import tempfile

from published_runs import H100_TOML, RUNS, SHAPE, a100_toml, mc24_flops

HUGE = "1e18"
FREE = [
    ("memory-bound passes", f"memory_bw = {HUGE}"),
    ("communication", f"intra_busbw = {HUGE}\ninter_busbw = {HUGE}\np2p_bw_intra = {HUGE}\n"
     f"p2p_bw_inter = {HUGE}\nintra_latency_s = 0\ninter_latency_s = 0\ncollective_sms = 0\n"
     "tp_overlap_sms = 0"),
    # Halved, not freed: the fields are fractions of the peak (at most 1); the step grows by
    # the attention's time at cuDNN's rate.
    ("fused attention", f"attention_fwd_of_peak = {542.3 / 989 / 2}\n"
     f"attention_bwd_of_peak = {443.6 / 989 / 2}"),
    ("kernel overhead", "kernel_overhead_s = 0"),
]


def step(binary, toml, run):
    """The step time (s) of `run` at micro-batch 4, 1F1B, on the hardware file `toml` (None:
    the h100-80gb preset itself)."""
    src, name, layers, h, heads, tp, pp, gpus, batch, _ = run
    seq, vocab = SHAPE[src]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "h100.toml")
        with open(path, "w") as f:
            f.write(toml or "")
        hardware = (["--hardware-file", path] if toml else
                    ["--hardware", "h100-80gb", "--software", "megatron-core-2024"])
        args = [binary, "plan", *hardware, "--gpus", str(gpus), "--layers",
                str(layers), "--dim", str(h), "--heads", str(heads), "--seq", str(seq),
                "--vocab", str(vocab), "--batch", str(batch), "--tp", str(tp), "--pp", str(pp),
                "--dp", str(gpus // (tp * pp)), "--precision", "bf16", "--json", "--top", "1",
                "--zero", "1", "--cp", "1", "--micro-batch", "4", "--schedule", "1f1b"]
        args += ["--sequence-parallel"] if tp > 1 else []
        p = subprocess.run(args, capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["candidates"][0]["predicted"]["step_time_s"]


def gemm_flops(run):
    """The step's GEMM FLOPs per GPU: 3 passes x 2 N (12 h^2 per layer + V h) / tp."""
    src, _, layers, h, _, tp, _, gpus, batch, _ = run
    seq, vocab = SHAPE[src]
    tokens = batch * seq / (gpus // tp)
    return 3 * 2 * tokens * (12 * h * h * layers + vocab * h) / tp


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/meshtrain"
    rows = [r for r in RUNS if r[0] == "MC24" and r[6] == 1]
    print(f"{'model':6} {'published':>9} {'step':>7} " +
          " ".join(f"{label:>19}" for label, _ in FREE) +
          f" {'GEMMs':>7} {'model rate':>10} {'to close':>9}")
    for run in rows:
        published = mc24_flops(run[8], run[2], run[3]) / (run[7] * run[9] * 1e12)
        extra, parts = "", []
        total = last = step(binary, a100_toml(132, "megatron-core-2024", "", H100_TOML), run)
        if abs(total / step(binary, None, run) - 1) > 1e-9:
            sys.exit(f"{run[1]}: the h100 copy no longer matches the preset; update H100_TOML")
        taken = 0  # the attention's time, which stays in the copies' steps
        for label, change in FREE:
            toml = a100_toml(132, "megatron-core-2024", extra + change + "\n", H100_TOML)
            now = step(binary, toml, run) - taken
            if label == "fused attention":
                taken, now = now - last, 2 * last - now  # the halved rate's added time
            else:
                extra += change + "\n"
            parts.append(last - now)
            last = now
        flops, gap = gemm_flops(run), published - total
        rates = f"{flops / last / 1e12:6.0f} TF/s {flops / (last + gap) / 1e12:5.0f} TF/s"
        print(f"{run[1]:6} {published * 1e3:7.1f}ms {total * 1e3:5.1f}ms " +
              " ".join(f"{p * 1e3:15.1f} ms" for p in parts) + f" {last * 1e3:5.1f}ms {rates}")


if __name__ == "__main__":
    main()
