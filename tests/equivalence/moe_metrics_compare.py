#!/usr/bin/env python3
"""MoE routing metrics of a layout against one worker at the same groups (docs/moe.md):
every step's expert_load must list every MoE block of the model in block order with the
reference's counts, and aux_loss / dropped_frac must match. Under pipeline parallelism
each stage holds only its own blocks, so this fails if the stages' metrics are not all
gathered to rank 0.

  moe_metrics_compare.py --bin BIN --base "FLAGS" --reference "FLAGS" --layout "FLAGS"...
Exit status 0 when every layout matches, 1 otherwise (a line names layout, step, field).
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile


def run(binary, flags, path):
    cmd = [binary, "train"] + shlex.split(flags) + ["--metrics", path, "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL [{flags}]: exit {p.returncode}\n{p.stderr[-2000:]}")
    return {r["step"]: r for r in map(json.loads, open(path)) if "loss" in r}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--base", default="")
    ap.add_argument("--reference", default="")
    ap.add_argument("--layout", action="append", default=[])
    ap.add_argument("--blocks", type=int, required=True, help="MoE blocks in the model")
    ap.add_argument("--exact-steps", type=int, default=3,
                    help="steps whose loads must match exactly (later ones may differ by a "
                         "near-tie flipped by rounding)")
    args = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory(prefix="mt_moe_metrics_") as d:
        ref = run(args.bin, f"{args.base} {args.reference}", os.path.join(d, "ref.jsonl"))
        for i, layout in enumerate(args.layout):
            got = run(args.bin, f"{args.base} {layout}", os.path.join(d, f"l{i}.jsonl"))
            for step, r in sorted(ref.items()):
                g = got.get(step)
                if g is None or len(g["expert_load"]) != args.blocks:
                    print(f"FAIL [{layout}] step {step}: expert_load "
                          f"{None if g is None else g['expert_load']} (want {args.blocks} blocks)")
                    bad += 1
                    continue
                if step <= args.exact_steps and g["expert_load"] != r["expert_load"]:
                    print(f"FAIL [{layout}] step {step}: expert_load {g['expert_load']} "
                          f"vs reference {r['expert_load']}")
                    bad += 1
                for key in ("aux_loss", "dropped_frac"):
                    if abs(g[key] - r[key]) > 1e-5 * max(abs(r[key]), 1e-3):
                        print(f"FAIL [{layout}] step {step}: {key} {g[key]!r} "
                              f"vs reference {r[key]!r}")
                        bad += 1
            print(f"layout [{layout}]: {len(got)} steps, {args.blocks} blocks compared")
    print("OK" if bad == 0 else f"{bad} mismatch(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
