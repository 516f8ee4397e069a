#!/usr/bin/env python3
"""Load-balance study for docs/moe.md: trains the same small E=8, k=2 MoE model on the
embedded fortunes corpus three ways and measures how evenly the router spreads tokens.

  aux 0.01      the Switch aux loss at its default coefficient
  no aux        --aux-loss-coef 0 (nothing balances the router)
  bias (free)   --aux-loss-coef 0 --router-bias-update GAMMA (aux-loss-free balancing)

Dropless (--capacity-factor 0), so expert_load is exactly what the router selected.
Per step and MoE layer: max/mean load (1 = perfect; 8 = every token on one expert at k=1,
4 at k=2) and the coefficient of variation (std/mean) of the per-expert loads.
Writes OUT/table.md (the table in docs/moe.md), OUT/balance.svg (CV over steps, one line
per run and layer) and the runs' metrics. Plain SVG, no plotting library.

Usage: bench/moe_balance.py [--bin build/meshtrain] [--steps 300] [--gamma 0.001]
                            [--out out/moe_balance]
"""
import argparse
import json
import math
import os
import subprocess
import sys

MODEL = ["--layers", "2", "--dim", "64", "--heads", "4", "--seq", "64", "--batch", "16",
         "--experts", "8", "--topk", "2", "--capacity-factor", "0", "--lr", "0.003",
         "--warmup", "20", "--threads", "1", "--quiet"]


def run(binary, name, flags, steps, out):
    path = os.path.join(out, name.replace(" ", "_").replace("(", "").replace(")", "") + ".jsonl")
    cmd = [binary, "train"] + MODEL + ["--steps", str(steps), "--metrics", path] + flags
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return [r for r in map(json.loads, open(path)) if "loss" in r]


def balance(load):
    mean = sum(load) / len(load)
    var = sum((x - mean) ** 2 for x in load) / len(load)
    return max(load) / mean, math.sqrt(var) / mean


def table(runs, steps):
    marks = [s for s in (1, 10, 50, 100, 200, 300, 500, 1000) if s <= steps]
    if steps not in marks:
        marks.append(steps)
    lines = ["| run | layer | " + " | ".join(f"CV @{s}" for s in marks) +
             " | max/mean, last 50 steps | CE loss, last 50 steps |",
             "|---|---|" + "---|" * len(marks) + "---|---|"]
    for name, recs in runs:
        by_step = {r["step"]: r for r in recs}
        tail = recs[-50:]
        ce = sum(r["loss"] for r in tail) / len(tail)
        for layer in range(len(recs[0]["expert_load"])):
            cvs = [f"{balance(by_step[s]['expert_load'][layer])[1]:.2f}" for s in marks]
            mm = sum(balance(r["expert_load"][layer])[0] for r in tail) / len(tail)
            lines.append(f"| {name} | {layer} | " + " | ".join(cvs) + f" | {mm:.2f} | {ce:.3f} |")
    return "\n".join(lines) + "\n"


def svg(runs, steps, path):
    W, H, L, R, T, B = 720, 360, 60, 170, 30, 40
    ymax = max(balance(r["expert_load"][l])[1] for _, recs in runs for r in recs
               for l in range(len(r["expert_load"])))
    ymax = max(0.1, math.ceil(ymax * 10) / 10)
    x = lambda s: L + (W - L - R) * (s - 1) / max(1, steps - 1)
    y = lambda v: T + (H - T - B) * (1 - v / ymax)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="18">Expert load coefficient of variation (std/mean) per step, '
           f'E=8 k=2, dropless</text>']
    for i in range(6):
        v = ymax * i / 5
        out.append(f'<line x1="{L}" x2="{W - R}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for s in sorted({1, steps // 2, steps}):
        out.append(f'<text x="{x(s):.1f}" y="{H - B + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 6}" text-anchor="middle">step</text>')
    row = 0
    for c, (name, recs) in enumerate(runs):
        for layer in range(len(recs[0]["expert_load"])):
            pts = " ".join(f"{x(r['step']):.1f},{y(balance(r['expert_load'][layer])[1]):.1f}"
                           for r in recs)
            dash = ' stroke-dasharray="5,3"' if layer else ""
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colors[c % 4]}" '
                       f'stroke-width="1.5"{dash}/>')
            ly = T + 10 + 18 * row
            out.append(f'<line x1="{W - R + 10}" x2="{W - R + 34}" y1="{ly}" y2="{ly}" '
                       f'stroke="{colors[c % 4]}" stroke-width="2"{dash}/>')
            out.append(f'<text x="{W - R + 40}" y="{ly + 4}">{name}, layer {layer}</text>')
            row += 1
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/meshtrain")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--gamma", type=float, default=0.001)
    ap.add_argument("--out", default="out/moe_balance")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    configs = [("aux 0.01", []),
               ("no aux", ["--aux-loss-coef", "0"]),
               (f"bias {args.gamma:g}", ["--aux-loss-coef", "0",
                                         "--router-bias-update", str(args.gamma)])]
    runs = [(name, run(args.bin, name, flags, args.steps, args.out)) for name, flags in configs]
    t = table(runs, args.steps)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(t)
    svg(runs, args.steps, os.path.join(args.out, "balance.svg"))
    print(t)
    print(f"wrote {args.out}/table.md and {args.out}/balance.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
