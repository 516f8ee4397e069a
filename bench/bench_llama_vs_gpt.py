#!/usr/bin/python3
"""The Llama block against the GPT block in meshtrain, at equal parameter count and sequence.

Issue 32's goal: Llama's tokens/s >= 0.9x GPT's at 1 thread, fp32 and bf16 (compare MFU,
since the two blocks' FLOPs per token differ slightly). The pairs are bench_vs_pytorch.py's
configs: GPT "a" (4L d256 h8 T128) with Llama "la" (GQA with 2 K/V heads, SwiGLU width 816,
0.5% more parameters per layer), and "b" with "lb". Both run `meshtrain train` on the same
random tokens; rounds alternate the two so load from elsewhere hits neither side alone. The
table gives median step time, tokens/s, meshtrain's `mfu` (against its precision's GEMM peak)
and the Llama/GPT ratios of each.

Usage: bench/bench_llama_vs_gpt.py [--meshtrain BIN] [--pairs a:la,b:lb] [--precision fp32,bf16]
                                   [--threads 1] [--steps 12] [--warmup-steps 3] [--rounds 3]
"""
import argparse
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_vs_pytorch as bvp  # noqa: E402


def run_once(a, cfg, precision, threads, data, d):
    metrics = os.path.join(d, "m.jsonl")
    flags = bvp.train_flags(cfg[:6], threads, a.steps, data, None)[:-2]  # no --init-from
    if len(cfg) > 6:
        flags += bvp.llama_flags(cfg)
    recs = bvp.run_metrics([a.meshtrain, "train"] + flags +
                           ["--metrics", metrics, "--precision", precision, "--quiet"],
                           dict(os.environ), metrics)
    kept = recs[a.warmup_steps:]
    t = statistics.median(r["step_time_s"] for r in kept)
    return t, statistics.median(r.get("mfu", 0.0) for r in kept)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--meshtrain", default=os.path.join(os.path.dirname(HERE), "build", "meshtrain"))
    ap.add_argument("--pairs", default="a:la,b:lb")
    ap.add_argument("--precision", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="mt_llama_gpt_")
    data = os.path.join(d, "train.bin")
    import numpy as np
    bvp.ref.write_shard(data, np.random.default_rng(0).integers(0, 256, 1_000_000))
    print("| pair | precision | GPT ms/step | Llama ms/step | tok/s Llama/GPT | GPT mfu | "
          "Llama mfu | mfu Llama/GPT |")
    print("|---|---|---|---|---|---|---|---|")
    for pair in a.pairs.split(","):
        g, l = pair.split(":")
        for prec in a.precision.split(","):
            runs = {g: [], l: []}
            for _ in range(a.rounds):
                runs[g].append(run_once(a, bvp.CONFIGS[g], prec, a.threads, data, d))
                runs[l].append(run_once(a, bvp.LLAMA_CONFIGS[l], prec, a.threads, data, d))
            tg = statistics.median(x[0] for x in runs[g])
            tl = statistics.median(x[0] for x in runs[l])
            mg = statistics.median(x[1] for x in runs[g])
            ml = statistics.median(x[1] for x in runs[l])
            print(f"| {g} vs {l} | {prec} | {tg * 1e3:.1f} | {tl * 1e3:.1f} | {tg / tl:.2f} | "
                  f"{100 * mg:.1f}% | {100 * ml:.1f}% | **{ml / mg:.2f}** |", flush=True)
    print(f"\n{a.threads} thread(s); median of {a.rounds} alternating runs, each the median of "
          f"steps {a.warmup_steps + 1}..{a.steps}; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
