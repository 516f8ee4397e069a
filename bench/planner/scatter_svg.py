#!/usr/bin/env python3
"""Draws predicted vs measured step time (closed_loop.py's closed_loop.json) as an SVG.

Usage: python3 bench/planner/scatter_svg.py OUT_DIR/closed_loop.json docs/img/planner_scatter.svg
       [--cpu]   (the CPU-time estimate instead of the wall time)
"""
import json
import sys


def main():
    data = json.load(open(sys.argv[1]))
    cpu = "--cpu" in sys.argv
    rows = data["cpu_rows" if cpu else "rows"]  # [name, ranks, predicted_s, measured_s, error]
    hi = max(max(r[2], r[3]) for r in rows) * 1.1e3
    W, H, M = 520, 520, 60
    sx = lambda v: M + v / hi * (W - 2 * M)
    sy = lambda v: H - M - v / hi * (H - 2 * M)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{sx(0)}" y1="{sy(0)}" x2="{sx(hi)}" y2="{sy(hi)}" stroke="#999" '
           f'stroke-dasharray="4 3"/>']
    for band, colour in ((0.2, "#f4d6d6"), (0.1, "#d6ecd6")):
        pts = f"{sx(0)},{sy(0)} {sx(hi)},{sy(hi * (1 + band))} {sx(hi)},{sy(hi * (1 - band))}"
        out.append(f'<polygon points="{pts}" fill="{colour}" opacity="0.6"/>')
    out.append(f'<line x1="{M}" y1="{H - M}" x2="{W - M}" y2="{H - M}" stroke="black"/>')
    out.append(f'<line x1="{M}" y1="{M}" x2="{M}" y2="{H - M}" stroke="black"/>')
    for i in range(6):
        v = hi * i / 5
        out.append(f'<text x="{sx(v)}" y="{H - M + 15}" text-anchor="middle">{v:.0f}</text>')
        out.append(f'<text x="{M - 5}" y="{sy(v) + 4}" text-anchor="end">{v:.0f}</text>')
    what = "CPU-time estimate" if cpu else "measured wall"
    out.append(f'<text x="{W / 2}" y="{H - 20}" text-anchor="middle">{what} step time (ms)</text>')
    out.append(f'<text x="15" y="{H / 2}" text-anchor="middle" transform="rotate(-90 15 {H / 2})">'
               'predicted step time (ms)</text>')
    for name, ranks, pred, meas, err in rows:
        x, y = sx(meas * 1e3), sy(pred * 1e3)
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="#1f77b4"><title>{name}: '
                   f'{err:+.1%}</title></circle>')
        out.append(f'<text x="{x + 6:.1f}" y="{y - 4:.1f}" font-size="9">{name}</text>')
    load = data.get("load", [0, 0])
    cores = data.get("cores", 2)
    valid = load[0] <= cores - 0.5  # the runs' own ranks raise the load after (closed_loop.py)
    out.append(f'<text x="{M}" y="20">meshtrain plan --hardware local vs {what} '
               f'(load {load[0]:.1f} -> {load[1]:.1f}); bands: 10%, 20%</text>')
    if not valid:
        out.append(f'<text x="{M}" y="36" fill="#c00">NOT VALID: the machine was busy '
                   'before the runs</text>')
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
