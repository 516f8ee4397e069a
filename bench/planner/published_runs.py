#!/usr/bin/env python3
"""The planner against published Megatron-LM runs (a check, never a fit).

Usage: python3 bench/planner/published_runs.py build/meshtrain [--ablate]

--ablate: the same check with each mechanism of the software profile (and the GEMM wave
model) switched off in turn, through --hardware-file copies of the a100-80gb preset; the
first row ("nothing") must reproduce the preset's predictions exactly (checked), so the
copy cannot drift from src/plan/hardware_profile.cpp unnoticed.

For each run, `meshtrain plan --hardware a100-80gb` is given the published model, global
batch, GPU count and the layout knobs the paper states (tp, pp, dp, recomputation, sequence
parallelism, no ZeRO); the knobs it does not state (micro-batch, schedule, virtual stages)
are left to the search. The published throughput is turned into a step time with the
paper's own FLOP count, and the planner's first candidate is compared with it.

Sources (entered by hand from the papers; see docs/planner.md for how each was checked):
  N21 = Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
        Clusters Using Megatron-LM", Table 1 (weak scaling, A100-80GB, fp16, full
        activation recomputation, vocab 51200, seq 2048). Throughput in teraFLOP/s per GPU
        counted with the paper's Eq. (3), which includes the recomputed forward:
        96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
  K22 = Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
        Models", Tables 3-5 (A100-80GB, bf16, tp 8, dp 1, sequence parallelism + selective
        recomputation, vocab 51200, seq 2048): end-to-end iteration time in seconds.
"""
import json
import os
import subprocess
import sys
import tempfile

# (source, name, layers, hidden, heads, tp, pp, gpus, batch, published)
# N21: published = teraFLOP/s per GPU; K22: published = iteration time in seconds.
RUNS = [
    ("N21", "1.7B", 24, 2304, 24, 1, 1, 32, 512, 137),
    ("N21", "3.6B", 30, 3072, 32, 2, 1, 64, 512, 138),
    ("N21", "7.5B", 36, 4096, 32, 4, 1, 128, 512, 142),
    ("N21", "18.4B", 40, 6144, 48, 8, 1, 256, 1024, 135),
    ("N21", "39.1B", 48, 8192, 64, 8, 2, 512, 1536, 138),
    ("N21", "76.1B", 60, 10240, 80, 8, 4, 1024, 1792, 140),
    ("N21", "145.6B", 80, 12288, 96, 8, 8, 1536, 2304, 148),
    ("N21", "310.1B", 96, 16384, 128, 8, 16, 1920, 2160, 155),
    ("N21", "529.6B", 105, 20480, 128, 8, 35, 2520, 2520, 163),
    ("N21", "1008.0B", 128, 25600, 160, 8, 64, 3072, 3072, 163),
    ("K22", "22B", 48, 6144, 64, 8, 1, 8, 4, 1.10),
    ("K22", "175B", 96, 12288, 96, 8, 8, 64, 64, 13.75),
    ("K22", "530B", 105, 20480, 128, 8, 35, 280, 280, 37.83),
    ("K22", "1T", 128, 25600, 160, 8, 64, 512, 512, 71.49),
]
SEQ, VOCAB = 2048, 51200


def n21_flops(batch, layers, h):
    s, v = SEQ, VOCAB
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


# The a100-80gb preset as a hardware file (src/plan/hardware_profile.cpp), for --ablate.
A100_TOML = """[hardware]
name = "a100-80gb-copy"
memory_bytes = 85899345920
peak_fp32 = 156e12
peak_bf16 = 312e12
gemm_efficiency = 0.80
gemm_half_dim = 128
sms = {sms}
memory_bw = 1733150000000
kernel_overhead_s = 4e-6
intra_busbw = 230e9
intra_latency_s = 8e-6
inter_busbw = 23e9
inter_latency_s = 15e-6
p2p_bw_intra = 195e9
p2p_bw_inter = 23e9
software = "{software}"
{extra}
"""

ABLATIONS = [
    ("nothing", "", 108),
    ("wave quantisation (sms = 0)", "", 0),
    ("dropout", "dropout = false", 108),
    ("dp reduction after the pipeline", "dp_overlap = 1", 108),
    ("gradient-accumulation pass", "grad_accum_pass = false", 108),
    ("optimizer passes (32 B)", "optimizer_bytes = 32", 108),
    ("blocking scatter/gather p2p", "p2p_blocking = false\np2p_scatter_gather = false", 108),
    ("fp32 cross-entropy", "fp32_cross_entropy = false", 108),
    ("async tp backward (2022)", "tp_backward_overlap = false", 108),
]


def predict(binary, hardware, run):
    """(published step time s, predicted step time s or None, note) of one run."""
    src, name, layers, h, heads, tp, pp, gpus, batch, pub = run
    dp = gpus // (tp * pp)
    args = [binary, "plan", *hardware(src), "--gpus", str(gpus),
            "--layers", str(layers), "--dim", str(h), "--heads", str(heads),
            "--seq", str(SEQ), "--vocab", str(VOCAB), "--batch", str(batch),
            "--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--zero", "0",
            "--precision", "bf16", "--json", "--top", "1"]
    if src == "N21":
        args += ["--recompute", "full", "--sequence-parallel=false"]
        published_s = n21_flops(batch, layers, h) / (gpus * pub * 1e12)
    else:
        args += ["--recompute", "selective", "--sequence-parallel"]
        published_s = pub
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        return published_s, None, p.stderr.strip()
    c = json.loads(p.stdout)["candidates"][0]
    lay = c["layout"]
    return (published_s, c["predicted"]["step_time_s"],
            f"mb {lay['micro_batch']} {lay['schedule']} v{lay['virtual_stages']}")


def software(src):
    return "megatron-lm-2021" if src == "N21" else "megatron-lm-2022"


def ablate(binary):
    preset = [predict(binary, lambda src: ["--hardware", "a100-80gb", "--software",
                                           software(src)], run) for run in RUNS]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'switched off':34} {'mean |error|':>12} {'max':>6} {'signed mean':>12}")
        for label, extra, sms in ABLATIONS:
            def hardware(src):
                path = os.path.join(tmp, software(src) + ".toml")
                with open(path, "w") as f:
                    f.write(A100_TOML.format(sms=sms, software=software(src), extra=extra))
                return ["--hardware-file", path]
            errs = []
            for run, ref in zip(RUNS, preset):
                pub, pred, _ = predict(binary, hardware, run)
                if label == "nothing" and ((pred is None) != (ref[1] is None) or (
                        pred is not None and abs(pred / ref[1] - 1) > 1e-9)):
                    sys.exit(f"the a100 copy in this script no longer matches the preset "
                             f"({run[1]}: {pred} vs {ref[1]}); update A100_TOML")
                if pred is not None:
                    errs.append(pred / pub - 1)
            print(f"{label:34} {sum(map(abs, errs)) / len(errs):12.1%} "
                  f"{max(map(abs, errs)):6.1%} {sum(errs) / len(errs):+12.1%}")


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/meshtrain"
    if "--ablate" in sys.argv[2:]:
        return ablate(binary)
    rows, errors = [], []
    for run in RUNS:
        src, name, gpus = run[0], run[1], run[7]
        # The software behind each run (schedules, dp overlap, dropout, loss, optimizer).
        published_s, pred, note = predict(
            binary, lambda s: ["--hardware", "a100-80gb", "--software", software(s)], run)
        if pred is None:
            rows.append((src, name, gpus, published_s, None, note))
            continue
        err = pred / published_s - 1
        errors.append(abs(err))
        rows.append((src, name, gpus, published_s, pred, f"{err:+.1%}  {note}"))
    print(f"{'src':4} {'model':8} {'GPUs':>5} {'published s':>12} {'predicted s':>12}  error")
    for src, name, gpus, pub, pred, note in rows:
        ps = f"{pred:12.3f}" if pred is not None else f"{'-':>12}"
        print(f"{src:4} {name:8} {gpus:5d} {pub:12.3f} {ps}  {note}")
    if errors:
        print(f"mean |error| {sum(errors) / len(errors):.1%}, max {max(errors):.1%} "
              f"over {len(errors)} runs (goal: mean <= 5%, max <= 10%)")


if __name__ == "__main__":
    main()
