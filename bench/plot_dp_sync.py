#!/usr/bin/env python3
"""The communication tax as a picture: tokens/s against validation loss, one dot per
--dp-sync setting, from the CSV that docs/multihost.md's table was measured into
(bench/multihost_bench.sh train --rate 1gbit). Usage: plot_dp_sync.py CSV OUT.svg"""
import csv
import sys

rows = list(csv.DictReader(open(sys.argv[1])))
W, H, L, R, T, B = 560, 340, 70, 150, 40, 50
xs = [float(r["tokens_per_s"]) for r in rows]
ys = [float(r["val_loss"]) for r in rows]
x0, x1 = 0, 2000 * (int(max(xs) * 1.1 / 2000) + 1)  # ticks every 2000 tokens/s
y0, y1 = min(ys) - 0.05, max(ys) + 0.05
px = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
py = lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{L}" y="20" font-size="13">dp 4 at 1 Gbit/s: throughput vs validation loss after 40 steps</text>',
       f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#888"/>']
for x in range(x0, x1 + 1, 2000):
    out.append(f'<text x="{px(x):.1f}" y="{H - B + 15}" text-anchor="middle">{x}</text>')
for i in range(6):
    y = y0 + (y1 - y0) * i / 5
    out.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">tokens/s (higher is better)</text>')
out.append(f'<text transform="translate(16 {(T + H - B) / 2}) rotate(-90)" text-anchor="middle">val loss (lower is better)</text>')
colors = ["#888", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728"]
seen = []
for r, x, y, c in zip(rows, xs, ys, colors):
    # Settings with the same loss (flat and hybrid every-step compute the same model) would
    # print over each other: a later one's label goes below its dot.
    dy = 18 if any(abs(y - s) < 0.01 for s in seen) else 4
    seen.append(y)
    out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="5" fill="{c}"/>')
    out.append(f'<text x="{px(x) + 8:.1f}" y="{py(y) + dy:.1f}">{r["run"]} ({float(r["exposed_comm_s"]) * 1000:.0f} ms exposed)</text>')
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
