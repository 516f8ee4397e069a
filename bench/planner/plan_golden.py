#!/usr/bin/env python3
"""`meshtrain plan`'s outputs against a stored golden file (the planner's refactors must not
change a prediction).

Usage: python3 bench/planner/plan_golden.py build/meshtrain [--capture] [--only SUBSTR]
       [--golden FILE] [--default-suite]

Runs every case below (the README's and docs/planner.md's examples, the published-runs table
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
--default-suite leaves out the cases of FULL_ONLY (the default test suite's plan.golden; the
`full` label's plan.golden_full runs every case).
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
import published_runs as pr  # noqa: E402  (RUNS, A100_TOML, ABLATIONS)
import modern_runs as mr  # noqa: E402  (RUNS)

GOLDEN = os.path.join(HERE, "golden", "plan_golden.json")
LOCAL = os.path.join(HERE, "golden", "local.toml")

GPT175 = "--layers 96 --dim 12288 --heads 96 --seq 2048 --vocab 51200 --batch 1536".split()
README = "--layers 48 --dim 6144 --heads 48 --seq 2048 --vocab 51200 --batch 512".split()
SMALL = "--layers 4 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 8".split()
MEDIUM = "--layers 4 --dim 256 --heads 8 --seq 128 --vocab 256 --batch 8".split()
LLAMA70 = ("--arch llama --layers 80 --dim 8192 --heads 64 --kv-heads 8 --ffn-dim 28672 "
           "--vocab 32000 --seq 4096 --tie-embeddings=false --batch 1024").split()
MOE = "--layers 8 --dim 1024 --heads 16 --seq 1024 --vocab 32000 --batch 64".split() + \
    "--experts 8 --topk 2".split()


# A case whose search another case already pins, left to the full suite: the 175B search
# (a fifth of the file's time) is pinned number by number by "docs 175b json", and the
# --explain text it would add is the same renderer "docs h100 tp8 explain" and the other
# explain cases pin.
FULL_ONLY = {"docs 175b explain"}


def published_args(run, software):
    src, name, layers, h, heads, tp, pp, gpus, batch, pub = run
    a = ["--gpus", str(gpus), "--layers", str(layers), "--dim", str(h), "--heads", str(heads),
         "--seq", str(pr.SEQ), "--vocab", str(pr.VOCAB), "--batch", str(batch), "--tp", str(tp),
         "--pp", str(pp), "--dp", str(gpus // (tp * pp)), "--zero", "0", "--precision", "bf16"]
    a += (["--recompute", "full", "--sequence-parallel=false"] if src == "N21" else
          ["--recompute", "selective", "--sequence-parallel"])
    if software:
        a += ["--software", software]
    return a


def cases(tmp):
    """(name, plan arguments) of every case; hardware files are written into tmp."""
    c = []
    a100, h100 = ["--hardware", "a100-80gb"], ["--hardware", "h100-80gb"]
    c.append(("readme", a100 + ["--gpus", "64"] + README))
    c.append(("readme json", a100 + ["--gpus", "64"] + README + ["--json"]))
    c.append(("docs 175b explain", a100 + ["--gpus", "1024"] + GPT175 + ["--top", "12", "--explain"]))
    c.append(("docs 175b json", a100 + ["--gpus", "1024"] + GPT175 + ["--top", "12", "--json"]))
    c.append(("docs 175b megatron-2022", a100 + ["--gpus", "1024"] + GPT175 +
              ["--software", "megatron-lm-2022", "--top", "3", "--json"]))
    c.append(("docs h100 tp8 json", h100 + ["--gpus", "64"] + README + ["--tp", "8", "--json"]))
    c.append(("docs h100 tp8 explain", h100 + ["--gpus", "64"] + README + ["--tp", "8", "--explain",
                                                                             "--top", "3"]))
    for run in pr.RUNS:
        for sw in (pr.software(run[0]), "meshtrain"):
            c.append((f"published {run[0]} {run[1]} {sw}",
                      a100 + published_args(run, sw) + ["--json", "--top", "3"]))
        c.append((f"published {run[0]} {run[1]} text", a100 + published_args(run, pr.software(run[0]))))
    for label, extra, sms in pr.ABLATIONS:
        for sw in ("megatron-lm-2021", "megatron-lm-2022"):
            path = os.path.join(tmp, f"{len(c)}.toml")
            with open(path, "w") as f:
                f.write(pr.a100_toml(sms, sw, extra))
            for run in pr.RUNS:
                if pr.software(run[0]) == sw:
                    c.append((f"ablate {label} {run[0]} {run[1]}",
                              ["--hardware-file", path] + published_args(run, None) +
                              ["--json", "--top", "1"]))
    for run in mr.RUNS:
        c.append((f"modern {run['src']} {run['name']} {run['gpus']}",
                  mr.plan_args(run) + ["--json", "--top", "3"]))
    c.append(("llama 70b 512 h100", h100 + ["--gpus", "512"] + LLAMA70 + ["--top", "8"]))
    c.append(("llama 70b compare", h100 + ["--gpus", "512"] + LLAMA70 + [
        "--compare", "dp=512,zero=3", "--compare",
        "dp=16,tp=4,pp=8,schedule=interleaved,virtual-stages=8,zero=2", "--compare",
        "tp=8,pp=4,schedule=1f1b"]))
    c.append(("gpu small compare json", h100 + ["--gpus", "4"] + SMALL + [
        "--compare", "tp=4", "--compare", "dp=4,zero=3", "--compare", "pp=2", "--json"]))
    c.append(("gpu small json", a100 + ["--gpus", "8"] + SMALL + ["--json", "--top", "5"]))
    c.append(("gpu small h100 explain", h100 + ["--gpus", "4", "--tp", "2", "--explain", "--top", "3"] + SMALL))
    c.append(("gpu moe a100", a100 + ["--gpus", "16"] + MOE + ["--json", "--top", "5"]))
    c.append(("gpu moe h100 explain", h100 + ["--gpus", "16"] + MOE + ["--explain", "--top", "3"]))
    c.append(("gpu moe megatron-2021", a100 + ["--gpus", "16"] + MOE +
              ["--software", "megatron-lm-2021", "--json", "--top", "3"]))
    c.append(("gpu fp32 zero3", a100 + ["--gpus", "32"] + README + ["--precision", "fp32", "--zero", "3",
                                                                      "--json", "--top", "3"]))
    hw = os.path.join(tmp, "slow.toml")
    with open(hw, "w") as f:
        f.write("[hardware]\nname = \"slow-cluster\"\ndevices_per_node = 4\nmemory_bytes = 1e11\n"
                "peak_fp32 = 1e13\npeak_bf16 = 2e13\nmemory_bw = 1e12\nintra_busbw = 1e11\n"
                "inter_busbw = 1e9\np2p_bw_intra = 1e11\n")
    c.append(("hardware file", ["--hardware-file", hw, "--gpus", "8", "--json", "--top", "5"] +
              "--layers 8 --dim 1024 --heads 16 --seq 512 --vocab 1024 --batch 64".split()))
    # Local: the closed loop's layouts (every knob fixed, as closed_loop.py predicts them).
    local = ["--hardware", "local", "--profile", LOCAL]
    sys.path.insert(0, HERE)
    import closed_loop as cl  # noqa: E402
    for name, ranks, k in cl.LAYOUTS:
        k = cl.resolve(k)
        c.append((f"local {name}", local + ["--ranks", str(ranks), "--json", "--top", "1"] +
                  MEDIUM + cl.knob_args(k, True)))
    for ranks in (1, 2, 4, 8):
        c.append((f"local search {ranks}", local + ["--ranks", str(ranks), "--json"] + MEDIUM))
    c.append(("local search 4 threads 2", local + ["--ranks", "4", "--threads", "2", "--json"] + MEDIUM))
    c.append(("local search bf16", local + ["--ranks", "2", "--precision", "bf16", "--json"] + MEDIUM))
    c.append(("local search mpi", local + ["--ranks", "2", "--backend", "mpi", "--json"] + MEDIUM))
    c.append(("local search moe", local + ["--ranks", "4", "--experts", "4", "--json"] + MEDIUM))
    c.append(("local search moe bf16", local + ["--ranks", "2", "--experts", "4", "--precision", "bf16",
                                                "--json"] + MEDIUM))
    c.append(("local explain", local + ["--ranks", "4", "--explain", "--top", "3"] + MEDIUM))
    c.append(("local explain bf16 moe", local + ["--ranks", "2", "--experts", "4", "--precision",
                                                 "bf16", "--explain", "--top", "3"] + MEDIUM))
    c.append(("local text small", local + ["--ranks", "2"] + SMALL))
    # Refusals: one line, exit 2, the same line.
    for i, bad in enumerate([
            "--hardware tpu --gpus 8", "--hardware a100-80gb --gpus 8 --tp 3",
            "--hardware a100-80gb --gpus 8 --dp 3", "--hardware a100-80gb",
            "--hardware a100-80gb --gpus 8 --precision fp8",
            "--hardware a100-80gb --gpus 8 --bucket-mb nan",
            "--hardware a100-80gb --gpus 8 --layers 96 --dim 12288 --heads 96 --seq 2048",
            "--hardware a100-80gb --gpus 8 --software megatron-lm-2023",
            "--hardware a100-80gb --gpus 8 --zero 3 --software megatron-lm-2022"]):
        c.append((f"refused {i}", SMALL + bad.split()))
    return c


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
