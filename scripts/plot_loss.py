#!/usr/bin/env python3
"""Draws the loss curves of a meshtrain metrics file (JSONL) as an SVG picture.

Usage: scripts/plot_loss.py METRICS.jsonl [OUT.svg] [--title TEXT]

Plots the per-step training loss (thin), its moving average (thick) and the validation loss
(dots) against the step. Plain SVG with no plotting library, so it runs anywhere python3 does.
"""
import json
import math
import sys


def read_metrics(path):
    steps, loss, val = [], [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            if "event" in rec or "step" not in rec:
                continue
            steps.append(rec["step"])
            loss.append(rec["loss"])
            if "val_loss" in rec:
                val.append((rec["step"], rec["val_loss"]))
    return steps, loss, val


def moving_average(xs, window):
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= window:
            acc -= xs[i - window]
        out.append(acc / min(i + 1, window))
    return out


def svg(steps, loss, val, title):
    W, H, left, right, top, bottom = 760, 420, 64, 20, 44, 48
    x0, x1 = min(steps), max(max(steps), min(steps) + 1)
    ys = loss + [v for _, v in val]
    y0, y1 = min(ys), max(ys)
    pad = 0.05 * (y1 - y0 or 1)
    y0, y1 = y0 - pad, y1 + pad

    def px(s):
        return left + (s - x0) / (x1 - x0) * (W - left - right)

    def py(v):
        return top + (y1 - v) / (y1 - y0) * (H - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{left}" y="24" font-size="15" font-weight="bold">{title}</text>']
    # Grid and tick labels.
    for i in range(6):
        v = y0 + (y1 - y0) * i / 5
        y = py(v)
        out.append(f'<line x1="{left}" x2="{W - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e4e4e4"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for i in range(6):
        s = x0 + (x1 - x0) * i / 5
        x = px(s)
        out.append(f'<text x="{x:.1f}" y="{H - bottom + 18}" text-anchor="middle">{s:.0f}</text>')
    out.append(f'<text x="{(left + W - right) / 2}" y="{H - 10}" text-anchor="middle">step</text>')
    out.append(f'<text x="16" y="{(top + H - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(top + H - bottom) / 2})">loss (nats)</text>')
    pts = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in zip(steps, loss))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#9ab8d8" stroke-width="1"/>')
    smooth = moving_average(loss, max(1, len(loss) // 40))
    pts = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in zip(steps, smooth))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#2b6cb0" stroke-width="2.5"/>')
    for s, v in val:
        out.append(f'<circle cx="{px(s):.1f}" cy="{py(v):.1f}" r="4" fill="#dd6b20"/>')
    lx = W - right - 230
    out.append(f'<line x1="{lx}" x2="{lx + 24}" y1="{top + 4}" y2="{top + 4}" stroke="#2b6cb0" stroke-width="2.5"/>')
    out.append(f'<text x="{lx + 30}" y="{top + 8}">train loss (moving average)</text>')
    if val:
        out.append(f'<circle cx="{lx + 12}" cy="{top + 22}" r="4" fill="#dd6b20"/>')
        out.append(f'<text x="{lx + 30}" y="{top + 26}">validation loss</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv):
    args = [a for a in argv[1:]]
    title = "meshtrain loss"
    if "--title" in args:
        i = args.index("--title")
        title = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    src = args[0]
    dst = args[1] if len(args) > 1 else src.rsplit(".", 1)[0] + "_loss.svg"
    steps, loss, val = read_metrics(src)
    if not steps:
        sys.exit(f"plot_loss: {src} holds no step records")
    if not all(math.isfinite(v) for v in loss):
        sys.exit(f"plot_loss: {src} holds non-finite losses")
    with open(dst, "w") as f:
        f.write(svg(steps, loss, val, title))
    print(f"wrote {dst}")


if __name__ == "__main__":
    main(sys.argv)
