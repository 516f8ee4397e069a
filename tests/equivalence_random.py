#!/usr/bin/env python3
"""Random layouts against one worker: the combinations no hand-written case lists.

Each draw picks a small model (dense or MoE), a precision and a random subset of the layout
knobs (dp, tp, pp, ZeRO, microbatches, schedule, recomputation, ep, sequence parallelism),
runs 3 steps, and compares the per-step losses with one worker on the same model and batch
(an MoE model against one worker with dp x microbatches groups, since the aux loss and the
capacity are per group: docs/moe.md). A layout train refuses must be refused with exit 2.
Tolerances, relative: fp32 2e-6 (reassociation of sums), bf16 2e-5 (the Bf16Layouts bound
of tests/train, with margin for the pipeline's and tp's other roundings).
Run by ctest under MESHTRAIN_FULL_TESTS=1: `equivalence_random.py MESHTRAIN WORKDIR SEED DRAWS`.
"""
import json
import os
import random
import subprocess
import sys


def losses(binary, args, work, name):
    path = os.path.join(work, name)
    r = subprocess.run([binary] + args + ["--metrics", path], capture_output=True, text=True,
                       errors="replace", timeout=300, cwd=work)
    if r.returncode != 0:
        return None, r
    with open(path) as f:
        records = [json.loads(line) for line in f]
    return [d["loss"] for d in records if "step" in d and "loss" in d], r


def flags(d):
    return [x for k, v in d.items() for x in ((k,) if v is None else (k, str(v)))]


def main():
    binary, work, seed, draws = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    os.makedirs(work, exist_ok=True)
    rng = random.Random(seed)
    problems, compared, refused = [], 0, 0
    for _ in range(draws):
        model = {"--layers": rng.choice([2, 4]), "--heads": rng.choice([2, 4]),
                 "--dim": rng.choice([32, 64]), "--seq": 16, "--batch": rng.choice([4, 8])}
        moe = rng.random() < 0.3
        if moe:
            model.update({"--experts": rng.choice([2, 4]), "--topk": rng.choice([1, 2])})
        precision = rng.choice(["fp32", "fp32", "bf16"])
        base = ["train", "--steps", "3", "--quiet", "--sample-tokens", "0",
                "--precision", precision] + flags(model)
        layout = {}
        for k, values in {"--dp": [1, 2, 4], "--tp": [1, 2], "--pp": [1, 2], "--zero": [0, 1, 2, 3],
                          "--microbatches": [1, 2, 4],
                          "--schedule": ["gpipe", "1f1b", "interleaved", "zb-h1"],
                          "--recompute": ["none", "selective", "full"]}.items():
            if rng.random() < 0.5:
                layout[k] = rng.choice(values)
        if moe and rng.random() < 0.5:
            layout["--ep"] = 2
        if rng.random() < 0.3:
            layout["--sequence-parallel"] = None
        groups = int(layout.get("--dp", 1)) * int(layout.get("--microbatches", 1))
        one, r1 = losses(binary, base + (["--microbatches", str(groups)] if moe else []), work,
                         "one.jsonl")
        if one is None:  # the model itself does not divide (e.g. batch by groups)
            continue
        got, r2 = losses(binary, base + flags(layout), work, "layout.jsonl")
        command = " ".join(base + flags(layout))
        if got is None:
            refused += 1
            if r2.returncode != 2:
                problems.append(f"exit {r2.returncode}: {command}: {r2.stderr[-300:]}")
            continue
        compared += 1
        tol = 2e-5 if precision == "bf16" else 2e-6
        worst = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(one, got))
        if len(one) != len(got) or worst > tol:
            problems.append(f"{command}: one worker {one}, layout {got} (worst {worst:.2e} > {tol})")
    print(f"seed {seed}: {compared} layouts compared, {refused} refused with exit 2, "
          f"{len(problems)} problems")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
