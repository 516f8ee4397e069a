#!/usr/bin/env python3
"""`meshtrain plan`'s outputs against a stored golden file (the planner's refactors must not
change a prediction).

Usage: python3 bench/planner/plan_golden.py build/meshtrain [--capture] [--only SUBSTR]
       [--golden FILE] [--default-suite]

Runs every case of golden_cases.py (the README's and docs/planner.md's examples, the published-runs table
of bench/planner/published_runs.py under the software that ran each row and under meshtrain's,
its --ablate hardware-file variants, bench/planner/modern_runs.py's rows, a 70B Llama on 512
H100s and --compare (text and JSON), GPU MoE plans, the closed loop's 35 local layouts and
searched local plans against the checked-in profile golden/local.toml, --explain for a few,
and the refusals) and compares each with the stored one:
  - the exit code, and stderr exactly up to its numbers;
  - JSON output: the same candidates (a tie in step time may swap places) with every number
    equal to 6 significant figures;
  - text output: the same text with every number equal to 6 significant figures, or within
    one unit of the last digit printed (a value on a rounding boundary);
  - --explain: the "assumptions:" block is not compared (it names the constants the code
    uses; everything else is).
--capture writes the golden file from the binary instead (only with the code the golden file
is meant to pin). Exit status 1 when a case differs.
--default-suite leaves out the cases of golden_cases.FULL_ONLY (the default test suite's
plan.golden; the `full` label's plan.golden_full runs every case).
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_cases import FULL_ONLY, LOCAL, cases  # noqa: E402

GOLDEN = os.path.join(HERE, "golden", "plan_golden.json")

NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def close(a, b, printed=None):
    if a == b:
        return True
    if math.isnan(a) or math.isnan(b):
        return False
    if abs(a - b) <= 1e-6 * max(abs(a), abs(b)):
        return True
    if printed is not None:  # one unit of the last digit printed
        frac = printed.split("e")[0].split("E")[0]
        digits = len(frac.split(".")[1]) if "." in frac else 0
        exp = int(printed.lower().split("e")[1]) if "e" in printed.lower() else 0
        return abs(a - b) <= 1.0001 * 10 ** (exp - digits)
    return False


def text_diff(old, new):
    """The first difference between two texts (numbers to 6 significant figures), or None."""
    ol, nl = old.splitlines(), new.splitlines()
    if len(ol) != len(nl):
        return f"{len(ol)} lines before, {len(nl)} now"
    for i, (a, b) in enumerate(zip(ol, nl)):
        if NUM.sub("#", a) != NUM.sub("#", b):
            return f"line {i + 1}:\n  before: {a}\n  now:    {b}"
        for x, y in zip(NUM.findall(a), NUM.findall(b)):
            if not close(float(x), float(y), x):
                return f"line {i + 1}: {x} -> {y}\n  before: {a}\n  now:    {b}"
    return None


def json_diff(a, b, where=""):
    if isinstance(a, dict) and isinstance(b, dict):
        # A key the schema gained since the golden file was captured is not a difference (the
        # next --capture pins it); a key lost is.
        if not set(a) <= set(b):
            return f"{where}: keys {sorted(a)} -> {sorted(b)}"
        for k in a:
            d = json_diff(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items -> {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = json_diff(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return None if a == b else f"{where}: {a!r} -> {b!r}"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return None if close(float(a), float(b)) else f"{where}: {a} -> {b}"
    return None if a == b else f"{where}: {a!r} -> {b!r}"


def candidates_diff(old, new):
    """JSON plans: candidates in order, except that equal step times may swap places."""
    a, b = old["candidates"], new["candidates"]
    if len(a) != len(b):
        return f"{len(a)} candidates -> {len(b)}"
    key = lambda c: json.dumps({k: v for k, v in c["layout"].items()  # noqa: E731
                                if k in a[0]["layout"]}, sort_keys=True)
    for i, x in enumerate(a):
        same = [y for y in b if key(y) == key(x)]
        if not same:
            return f"candidate {i + 1} {key(x)} is gone"
        j = b.index(same[0])
        if j != i and not close(b[i]["predicted"]["step_time_s"], x["predicted"]["step_time_s"]):
            return f"candidate {i + 1} {key(x)} moved to {j + 1}"
        d = json_diff(x, same[0], f"candidate {i + 1}")
        if d:
            return d
    return None


def strip_assumptions(text):
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith("assumptions:"):
            skip = True
        elif skip and not line.startswith("  - "):
            skip = False
        if not skip:
            out.append(line)
    return "\n".join(out)


def compare(old, new):
    if old["rc"] != new["rc"]:
        return f"exit {old['rc']} -> {new['rc']}: {new['err'].strip()}"
    d = text_diff(old["err"], new["err"])
    if d:
        return "stderr " + d
    if old["out"].startswith("{"):
        a, b = json.loads(old["out"]), json.loads(new["out"])
        if "compare" in a:  # --compare: the columns in the order given
            return json_diff(a, b, "compare")
        return candidates_diff(a, b)
    return text_diff(strip_assumptions(old["out"]), strip_assumptions(new["out"]))


def main():
    args = sys.argv[1:]
    binary = args[0] if args and not args[0].startswith("--") else "build/meshtrain"
    capture = "--capture" in args
    only = args[args.index("--only") + 1] if "--only" in args else None
    golden = args[args.index("--golden") + 1] if "--golden" in args else GOLDEN
    default_suite = "--default-suite" in args
    stored = {}
    if not capture:
        with open(golden) as f:
            stored = json.load(f)
    results, failed = {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, plan_args in cases(tmp):
            if only and only not in name:
                continue
            if default_suite and name in FULL_ONLY:
                continue
            p = subprocess.run([binary, "plan"] + plan_args, capture_output=True, text=True)
            # Temporary paths differ between runs.
            got = {"rc": p.returncode, "out": p.stdout.replace(LOCAL, "LOCAL"),
                   "err": p.stderr.replace(tmp, "TMP").replace(LOCAL, "LOCAL")}
            results[name] = got
            if capture:
                print(f"captured {name} (exit {p.returncode})", flush=True)
                continue
            if name not in stored:
                print(f"NEW     {name}")
                continue
            d = compare(stored[name], got)
            failed += d is not None
            print(f"{'DIFFERS' if d else 'same   '} {name}" + (f": {d}" if d else ""), flush=True)
    if capture:
        os.makedirs(os.path.dirname(golden), exist_ok=True)
        with open(golden, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
        print(f"wrote {len(results)} cases to {golden}")
        return 0
    print(f"{len(results) - failed} of {len(results)} cases match the golden file"
          f"{'' if not failed else f'; {failed} differ'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
