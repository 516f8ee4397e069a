#!/usr/bin/env python3
"""Every flag of the commands a user types, given values a user could type by mistake.

Each run must end in bounded time with exit 0 (the value is fine), or exit 2 with exactly one
line `meshtrain: error: ...` on stderr; never a crash, a signal, exit 1, a hang or a
multi-line error. The flags are read from each command's --help, so a new flag is swept
without editing this file. Run by ctest under MESHTRAIN_FULL_TESTS=1 (about 1600 runs,
several minutes on 2 cores): `flag_sweep.py BUILD/meshtrain WORKDIR`.
"""
import os
import re
import subprocess
import sys

BAD_VALUES = ["-1", "0", "1e30", "nan", "inf", "", "abc", "999999999999", "-0", "2.5", "1,2"]


def flags_of(binary, command):
    out = subprocess.run([binary] + command + ["--help"], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s+(--[a-z0-9-]+)\s*(\S*)", line)
        if m and m.group(1) not in ("--help", "--version"):
            found.append((m.group(1), m.group(2)))  # (flag, type or "" for a switch)
    return found


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "in.txt"), "w") as f:
        f.write("hello world, some text to prepare\n")
    weights = os.path.join(work, "w.safetensors")
    subprocess.run([binary, "train", "--layers", "2", "--dim", "32", "--heads", "2", "--seq", "16",
                    "--batch", "2", "--steps", "1", "--quiet", "--export", weights],
                   check=True, cwd=work, capture_output=True)
    commands = {
        "train": "train --layers 2 --dim 32 --heads 2 --seq 16 --batch 2 --steps 1 --quiet",
        "plan": "plan --layers 2 --dim 64 --heads 2 --seq 32 --vocab 256 --batch 8 "
                "--hardware a100-80gb --gpus 8",
        "sample": "sample --tokens 2 --init-from " + weights,
        "schedule": "schedule --pp 2 --microbatches 4",
        "prepare": "prepare --input in.txt --out prep_out",
        "bench comm": "bench comm --min-bytes 4 --max-bytes 4096 --iters 1 --repeats 1",
    }
    problems, runs = [], 0
    for name, base in commands.items():
        for flag, kind in flags_of(binary, name.split()):
            for value in (BAD_VALUES if kind else [None]):
                args = base.split() + [flag] + ([] if value is None else [value])
                runs += 1
                try:
                    r = subprocess.run([binary] + args, capture_output=True, text=True,
                                       errors="replace", timeout=60, cwd=work)
                except subprocess.TimeoutExpired:
                    problems.append(f"hang (60 s): {' '.join(args)}")
                    continue
                finally:
                    subprocess.run(["rm", "-rf", os.path.join(work, "prep_out")])
                err = r.stderr.strip().splitlines()
                if r.returncode == 2:
                    if len(err) != 1 or not err[0].startswith("meshtrain: error: "):
                        problems.append(f"exit 2 without one error line: {' '.join(args)}: {err[:3]}")
                elif r.returncode != 0:
                    problems.append(f"exit {r.returncode}: {' '.join(args)}: {err[-2:]}")
    print(f"{runs} runs, {len(problems)} problems")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
