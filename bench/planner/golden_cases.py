"""The cases of plan_golden.py: (name, `meshtrain plan` arguments), one function per group of
what a group pins: the README's and docs/planner.md's examples; the published runs (each
under the software that ran it and under meshtrain's) and their --ablate hardware files;
modern_runs.py's rows; GPU plans (a 70B Llama on 512 H100s, --compare, MoE, a hardware
file); the closed loop's local layouts and searches against golden/local.toml; the refusals.
The list's order is the golden file's.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import published_runs as pr  # noqa: E402  (RUNS, A100_TOML, ABLATIONS)
import modern_runs as mr  # noqa: E402  (RUNS)
import loop_layouts as ll  # noqa: E402  (closed_loop.py's LAYOUTS, resolve, knob_args)

LOCAL = os.path.join(HERE, "golden", "local.toml")

GPT175 = "--layers 96 --dim 12288 --heads 96 --seq 2048 --vocab 51200 --batch 1536".split()
README = "--layers 48 --dim 6144 --heads 48 --seq 2048 --vocab 51200 --batch 512".split()
SMALL = "--layers 4 --dim 64 --heads 4 --seq 32 --vocab 256 --batch 8".split()
MEDIUM = "--layers 4 --dim 256 --heads 8 --seq 128 --vocab 256 --batch 8".split()
LLAMA70 = ("--arch llama --layers 80 --dim 8192 --heads 64 --kv-heads 8 --ffn-dim 28672 "
           "--vocab 32000 --seq 4096 --tie-embeddings=false --batch 1024").split()
MOE = "--layers 8 --dim 1024 --heads 16 --seq 1024 --vocab 32000 --batch 64".split() + \
    "--experts 8 --topk 2".split()
A100, H100 = ["--hardware", "a100-80gb"], ["--hardware", "h100-80gb"]

# Cases whose search another case already pins, left to the full suite:
#  - the 175B search (a fifth of the file's time) is pinned number by number by "docs 175b
#    json", and the --explain text it would add is the same renderer "docs h100 tp8 explain"
#    and the other explain cases pin;
#  - "readme" prints as text the same ten candidates "readme json" pins to 6 figures (both at
#    the default --top 10); the text renderer stays pinned by "llama 70b 512 h100", the
#    "published ... text" cases and "local text small" (stop 40: 5% of the default run).
FULL_ONLY = {"docs 175b explain", "readme"}


def published_args(run, software):
    src, name, layers, h, heads, tp, pp, gpus, batch, pub = run
    seq, vocab = pr.SHAPE[src]
    a = ["--gpus", str(gpus), "--layers", str(layers), "--dim", str(h), "--heads", str(heads),
         "--seq", str(seq), "--vocab", str(vocab), "--batch", str(batch), "--tp", str(tp),
         "--pp", str(pp), "--dp", str(gpus // (tp * pp)), "--precision", "bf16"]
    if src == "MC24":  # the distributed optimizer, no cp, SP under tp (published_runs.py)
        a += ["--zero", "1", "--cp", "1"] + (["--sequence-parallel"] if tp > 1 else [])
    else:
        a += ["--zero", "0"] + (["--recompute", "full", "--sequence-parallel=false"]
                                if src in ("N21", "K22F") else
                                ["--recompute", "selective", "--sequence-parallel"])
    if software:
        a += ["--software", software]
    return a


def docs_cases():
    """The README's and docs/planner.md's examples."""
    return [
        ("readme", A100 + ["--gpus", "64"] + README),
        ("readme json", A100 + ["--gpus", "64"] + README + ["--json"]),
        ("docs 175b explain", A100 + ["--gpus", "1024"] + GPT175 + ["--top", "12", "--explain"]),
        ("docs 175b json", A100 + ["--gpus", "1024"] + GPT175 + ["--top", "12", "--json"]),
        ("docs 175b megatron-2022", A100 + ["--gpus", "1024"] + GPT175 +
         ["--software", "megatron-lm-2022", "--top", "3", "--json"]),
        ("docs h100 tp8 json", H100 + ["--gpus", "64"] + README + ["--tp", "8", "--json"]),
        ("docs h100 tp8 explain", H100 + ["--gpus", "64"] + README + ["--tp", "8", "--explain",
                                                                     "--top", "3"]),
    ]


def published_cases(tmp, first_index):
    """The published runs, then their --ablate variants (hardware files written into tmp,
    numbered from first_index, the case's place in the whole list)."""
    c = []
    for run in pr.RUNS:
        hw = ["--hardware", pr.hardware_preset(run[0])]
        for sw in (pr.software(run[0]), "meshtrain"):
            c.append((f"published {run[0]} {run[1]} {sw}",
                      hw + published_args(run, sw) + ["--json", "--top", "3"]))
        c.append((f"published {run[0]} {run[1]} text", hw + published_args(run, pr.software(run[0]))))
    for label, extra, sms in pr.ABLATIONS:
        for sw in ("megatron-lm-2021", "megatron-lm-2022"):
            path = os.path.join(tmp, f"{first_index + len(c)}.toml")
            with open(path, "w") as f:
                f.write(pr.a100_toml(sms, sw, extra))
            for run in pr.RUNS:
                if pr.software(run[0]) == sw:
                    c.append((f"ablate {label} {run[0]} {run[1]}",
                              ["--hardware-file", path] + published_args(run, None) +
                              ["--json", "--top", "1"]))
    return c


def modern_cases():
    return [(f"modern {run['src']} {run['name']} {run['gpus']}",
             mr.plan_args(run) + ["--json", "--top", "3"]) for run in mr.RUNS]


def gpu_cases(tmp):
    """GPU plans beyond the tables: a 70B Llama, --compare, MoE, fp32, a hardware file."""
    hw = os.path.join(tmp, "slow.toml")
    with open(hw, "w") as f:
        f.write("[hardware]\nname = \"slow-cluster\"\ndevices_per_node = 4\nmemory_bytes = 1e11\n"
                "peak_fp32 = 1e13\npeak_bf16 = 2e13\nmemory_bw = 1e12\nintra_busbw = 1e11\n"
                "inter_busbw = 1e9\np2p_bw_intra = 1e11\n")
    return [
        ("llama 70b 512 h100", H100 + ["--gpus", "512"] + LLAMA70 + ["--top", "8"]),
        ("llama 70b compare", H100 + ["--gpus", "512"] + LLAMA70 + [
            "--compare", "dp=512,zero=3", "--compare",
            "dp=16,tp=4,pp=8,schedule=interleaved,virtual-stages=8,zero=2", "--compare",
            "tp=8,pp=4,schedule=1f1b"]),
        ("gpu small compare json", H100 + ["--gpus", "4"] + SMALL + [
            "--compare", "tp=4", "--compare", "dp=4,zero=3", "--compare", "pp=2", "--json"]),
        ("gpu small json", A100 + ["--gpus", "8"] + SMALL + ["--json", "--top", "5"]),
        ("gpu small h100 explain", H100 + ["--gpus", "4", "--tp", "2", "--explain", "--top", "3"] + SMALL),
        ("gpu moe a100", A100 + ["--gpus", "16"] + MOE + ["--json", "--top", "5"]),
        ("gpu moe h100 explain", H100 + ["--gpus", "16"] + MOE + ["--explain", "--top", "3"]),
        ("gpu moe megatron-2021", A100 + ["--gpus", "16"] + MOE +
         ["--software", "megatron-lm-2021", "--json", "--top", "3"]),
        ("gpu fp32 zero3", A100 + ["--gpus", "32"] + README + ["--precision", "fp32", "--zero", "3",
                                                               "--json", "--top", "3"]),
        ("hardware file", ["--hardware-file", hw, "--gpus", "8", "--json", "--top", "5"] +
         "--layers 8 --dim 1024 --heads 16 --seq 512 --vocab 1024 --batch 64".split()),
    ]


def local_cases():
    """The closed loop's layouts (every knob fixed, as closed_loop.py predicts them), then
    searched and explained local plans, all against the checked-in profile."""
    local = ["--hardware", "local", "--profile", LOCAL]
    c = []
    for name, ranks, k in ll.LAYOUTS:
        k = ll.resolve(k)
        c.append((f"local {name}", local + ["--ranks", str(ranks), "--json", "--top", "1"] +
                  MEDIUM + ll.knob_args(k, True)))
    for ranks in (1, 2, 4, 8):
        c.append((f"local search {ranks}", local + ["--ranks", str(ranks), "--json"] + MEDIUM))
    return c + [
        ("local search 4 threads 2", local + ["--ranks", "4", "--threads", "2", "--json"] + MEDIUM),
        ("local search bf16", local + ["--ranks", "2", "--precision", "bf16", "--json"] + MEDIUM),
        ("local search mpi", local + ["--ranks", "2", "--backend", "mpi", "--json"] + MEDIUM),
        ("local search moe", local + ["--ranks", "4", "--experts", "4", "--json"] + MEDIUM),
        ("local search moe bf16", local + ["--ranks", "2", "--experts", "4", "--precision", "bf16",
                                           "--json"] + MEDIUM),
        ("local explain", local + ["--ranks", "4", "--explain", "--top", "3"] + MEDIUM),
        ("local explain bf16 moe", local + ["--ranks", "2", "--experts", "4", "--precision",
                                            "bf16", "--explain", "--top", "3"] + MEDIUM),
        ("local text small", local + ["--ranks", "2"] + SMALL),
    ]


def refusal_cases():
    """Refusals: one line, exit 2, the same line."""
    bad = ["--hardware tpu --gpus 8", "--hardware a100-80gb --gpus 8 --tp 3",
           "--hardware a100-80gb --gpus 8 --dp 3", "--hardware a100-80gb",
           "--hardware a100-80gb --gpus 8 --precision fp8",
           "--hardware a100-80gb --gpus 8 --bucket-mb nan",
           "--hardware a100-80gb --gpus 8 --layers 96 --dim 12288 --heads 96 --seq 2048",
           "--hardware a100-80gb --gpus 8 --software megatron-lm-2023",
           "--hardware a100-80gb --gpus 8 --zero 3 --software megatron-lm-2022"]
    return [(f"refused {i}", SMALL + b.split()) for i, b in enumerate(bad)]


def cases(tmp):
    """(name, plan arguments) of every case; hardware files are written into tmp."""
    c = docs_cases()
    c += published_cases(tmp, len(c))
    c += modern_cases()
    c += gpu_cases(tmp)
    c += local_cases()
    return c + refusal_cases()
