#!/usr/bin/env python3
"""The planner against published Megatron-LM runs (a check, never a fit).

Usage: python3 bench/planner/published_runs.py build/meshtrain [--ablate]

--ablate: the same check with each mechanism of the software profile (and the GEMM wave
model) switched off in turn, through --hardware-file copies of the presets: the A100 rows (N21
and K22) on a100-80gb, then the H100 rows (MC24) on h100-80gb with megatron-core-2024's
mechanisms; each table's first row ("nothing") must reproduce the preset's predictions exactly
(checked), so the copies cannot drift from src/plan/hardware_profile.cpp unnoticed.

For each run, `meshtrain plan --hardware a100-80gb` is given the published model, global
batch, GPU count and the layout knobs the paper states (tp, pp, dp, recomputation, sequence
parallelism, no ZeRO), and, where its authors published the run's script, the micro-batch
and schedule it used ("stated"); the planner's own choice of what is not stated
("searched": micro-batch, schedule, virtual stages) is the second column. The published
throughput is turned into a step time with the paper's own FLOP count, and the planner's
first candidate is compared with it.

Sources (entered by hand from the papers; see docs/planner.md for how each was checked):
  N21 = Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
        Clusters Using Megatron-LM", Table 1 (weak scaling, A100-80GB, fp16, full
        activation recomputation, vocab 51200, seq 2048). Throughput in teraFLOP/s per GPU
        counted with the paper's Eq. (3), which includes the recomputed forward:
        96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
        The runs' micro-batch and schedule: Megatron-LM's examples/sc21/run_table_1.sh (the
        paper's scripts: MBS, --num-layers-per-virtual-pipeline-stage), in STATED below.
  K22 = Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
        Models", Tables 3-5 (A100-80GB, bf16, tp 8, dp 1, sequence parallelism + selective
        recomputation, vocab 51200, seq 2048): end-to-end iteration time in seconds
        (Table 5, "Present Work"). Micro-batch: Table 3; schedule: section 6 ("the
        interleaving schedule with three interleaving stages (m = 3) for the 175B and 530B
        models"), in K22_STATED below.
  K22F = the same paper's Table 5 "Full Recompute" column: the same four configurations of
        Table 3 with full activation recomputation and no sequence parallelism (section 6.3:
        "improvement in the throughput over performing full recomputation without sequence
        parallelism"). Digits read from the text layer of an annotated copy of arXiv
        2205.05198v1, github.com/danielvegamyhre/ml-perf-reading-group, commit 4ba9bea8d6,
        session_9/reducing_activation_recomputation_[annotated].pdf; each row checked
        against the table's "Throughput Increase" column (full / present - 1 = 29.0%,
        31.8%, 29.7%, 32.1%, all four to the last digit).
  MC24 = Megatron-LM's README, H100 weak-scaling table (NVIDIA/Megatron-LM commit
        f2e5db402c, 2024-07-15, "New scaling figures on H100 GPUs", images/model_table.png,
        labelled "Megatron-Core r0.8.0"; transcribed from the image, every row's MFU checked
        as per-GPU teraFLOP/s / 989 and its aggregate as per-GPU x GPUs). GPT models,
        vocabulary 131,072, sequence 4,096, H100 (DGX, 80 GB), BF16, --overlap-grad-reduce
        --overlap-param-gather (distributed optimizer, ZeRO-1), --tp-comm-overlap (which needs
        sequence parallelism). Published: teraFLOP/s per GPU counted with Megatron's
        num_floating_point_operations (megatron/training/training.py at that commit; a plain
        GPT: 12 B s l h^2 (2 + s/h + 4 + V/(2 l h)) = 72 B s l h^2 (1 + s/(6h) + V/(12 l h)),
        no recomputed forward). Micro-batch, schedule and recomputation not published:
        searched (both columns are the search).
"""
import json
import os
import subprocess
import sys
import tempfile

# (source, name, layers, hidden, heads, tp, pp, gpus, batch, published)
# N21: published = teraFLOP/s per GPU; K22, K22F: published = iteration time in seconds.
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
    ("K22F", "22B", 48, 6144, 64, 8, 1, 8, 4, 1.42),
    ("K22F", "175B", 96, 12288, 96, 8, 8, 64, 64, 18.13),
    ("K22F", "530B", 105, 20480, 128, 8, 35, 280, 280, 49.05),
    ("K22F", "1T", 128, 25600, 160, 8, 64, 512, 512, 94.42),
    # MC24: published = teraFLOP/s per GPU (dp 48 in every row: GPUs = tp x pp x 48).
    ("MC24", "1.7B", 24, 2048, 16, 1, 1, 48, 192, 408.8),
    ("MC24", "7.1B", 30, 4096, 32, 2, 1, 96, 192, 465.9),
    ("MC24", "16B", 32, 6144, 48, 4, 1, 192, 192, 489.1),
    ("MC24", "32B", 48, 7168, 56, 8, 1, 384, 192, 459.6),
    ("MC24", "70B", 84, 8192, 64, 8, 2, 768, 384, 419.7),
    ("MC24", "119B", 92, 10240, 80, 8, 4, 1536, 768, 420.5),
    ("MC24", "177B", 96, 12288, 96, 8, 6, 2304, 1152, 432.8),
    ("MC24", "314B", 96, 16384, 128, 8, 8, 3072, 1536, 474.4),
    ("MC24", "462B", 112, 18432, 144, 8, 16, 6144, 3072, 459.9),
]
# (sequence, vocabulary) of each source's runs.
SHAPE = {"N21": (2048, 51200), "K22": (2048, 51200), "K22F": (2048, 51200),
         "MC24": (4096, 131072)}
SEQ, VOCAB = SHAPE["N21"]

# The runs' own micro-batch, schedule and virtual stages, where published: Megatron-LM
# examples/sc21/run_table_1.sh (MBS; --num-layers-per-virtual-pipeline-stage n gives
# v = layers / (pp n)).
STATED = {
    "1.7B": (16, "1f1b", 1), "3.6B": (16, "1f1b", 1), "7.5B": (16, "1f1b", 1),
    "18.4B": (8, "1f1b", 1), "39.1B": (4, "1f1b", 1), "76.1B": (2, "interleaved", 3),
    "145.6B": (2, "interleaved", 2), "310.1B": (1, "interleaved", 2),
    "529.6B": (1, "interleaved", 3), "1008.0B": (1, "1f1b", 1),
}

# Korthikanti et al. 2022 published no scripts; its text states the layout of both its
# columns (Table 5 runs "the four configurations listed in Table 3"): Table 3's micro-batch,
# and interleaving with m = 3 for 175B and 530B only (22B has pp 1; 1T is not interleaved).
K22_STATED = {
    "22B": (4, "1f1b", 1), "175B": (1, "interleaved", 3), "530B": (1, "interleaved", 3),
    "1T": (1, "1f1b", 1),
}


def n21_flops(batch, layers, h):
    s, v = SEQ, VOCAB
    return 96 * batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


def mc24_flops(batch, layers, h):
    """Megatron-Core's num_floating_point_operations for a plain GPT (MHA, 4h GeLU MLP)."""
    s, v = SHAPE["MC24"]
    return 72 * batch * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))


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
    ("dp reduction after the pipeline", "dp_overlap = 1\ngrad_sync_placement = 0", 108),
    ("stage syncs in the replay", "grad_sync_placement = 0", 108),
    ("gradient-accumulation pass", "grad_accum_pass = false", 108),
    ("optimizer passes (32 B)", "optimizer_bytes = 32", 108),
    ("grad buffer's 1/dp scaling pass", "grad_buffer_bytes = 0", 108),
    ("blocking scatter/gather p2p", "p2p_blocking = false\np2p_scatter_gather = false", 108),
    ("scatter/gather alone (2021 without)", "p2p_scatter_gather = false", 108),
    ("fp32 cross-entropy", "fp32_cross_entropy = false", 108),
    ("async tp backward (2022)", "tp_backward_overlap = false", 108),
    ("NCCL's SMs, async tp (2022)", "tp_overlap_sms = 0", 108),
    ("p2p latency (15 us -> 0)", "inter_latency_s = 0\nintra_latency_s = 0", 108),
]


# The h100-80gb preset as a hardware file, for --ablate's MC24 rows.
H100_TOML = """[hardware]
name = "h100-80gb-copy"
devices_per_node = 8
memory_bytes = 85899345920
peak_fp32 = 494.5e12
peak_bf16 = 989e12
peak_fp8 = 1979e12
gemm_efficiency = 0.75
gemm_half_dim = 192
sms = {sms}
memory_bw = 2847500000000
kernel_overhead_s = 4e-6
intra_busbw = 370e9
intra_latency_s = 8e-6
inter_busbw = 45e9
inter_latency_s = 15e-6
p2p_bw_intra = 360e9
p2p_bw_inter = 45e9
software = "{software}"
{extra}
"""

# megatron-core-2024's mechanisms, each switched back in turn (MC24 rows).
H100_ABLATIONS = [
    ("nothing", "", 132),
    ("wave quantisation (sms = 0)", "", 0),
    ("cuDNN attention rate (GEMM model)", "attention_fwd_of_peak = 0\nattention_bwd_of_peak = 0",
     132),
    ("param gather: fp32 bytes, hidden", "param_gather_bytes = 4\nparam_gather_overlap = 1",
     132),
    ("param gather not overlapped", "param_gather_overlap = 0", 132),
    ("dp reduction after the pipeline", "dp_overlap = 0\ngrad_sync_placement = 0", 132),
    ("stage syncs in the replay", "grad_sync_placement = 0", 132),
    ("dropout", "dropout = false", 132),
    ("fp32 cross-entropy", "fp32_cross_entropy = false", 132),
    ("tp comm overlap (TE userbuffers)", "tp_comm_overlap = false", 132),
    ("tp backward overlap", "tp_backward_overlap = false\ntp_comm_overlap = false", 132),
    ("optimizer passes (32 B)", "optimizer_bytes = 32", 132),
    ("grad buffer passes (zero on shard)", "grad_buffer_bytes = 0\noptimizer_bytes = 42", 132),
    ("collective latency (-> 0)", "inter_latency_s = 0\nintra_latency_s = 0", 132),
    ("NCCL's SMs beside compute (dp)", "collective_sms = 0", 132),
    ("userbuffers' SMs beside GEMMs (tp)", "tp_overlap_sms = 0", 132),
]


def a100_toml(sms, software_name, extra, template=A100_TOML):
    """The preset as a file; a line of `extra` whose key the preset has replaces that line."""
    lines = template.format(sms=sms, software=software_name, extra="").splitlines()
    for change in filter(None, extra.splitlines()):
        key = change.split("=")[0].strip()
        at = [i for i, line in enumerate(lines) if line.split("=")[0].strip() == key]
        if at:
            lines[at[0]] = change
        else:
            lines.append(change)
    return "\n".join(lines) + "\n"


def predict(binary, hardware, run, stated=True):
    """(published step time s, predicted step time s or None, note) of one run; stated: with
    the run's own micro-batch and schedule where published (else searched)."""
    src, name, layers, h, heads, tp, pp, gpus, batch, pub = run
    dp = gpus // (tp * pp)
    seq, vocab = SHAPE[src]
    args = [binary, "plan", *hardware(src), "--gpus", str(gpus),
            "--layers", str(layers), "--dim", str(h), "--heads", str(heads),
            "--seq", str(seq), "--vocab", str(vocab), "--batch", str(batch),
            "--tp", str(tp), "--pp", str(pp), "--dp", str(dp),
            "--precision", "bf16", "--json", "--top", "1"]
    stated_layout = {"N21": STATED, "K22": K22_STATED, "K22F": K22_STATED}.get(src, {})
    if stated and name in stated_layout:
        mb, schedule, v = stated_layout[name]
        args += ["--micro-batch", str(mb), "--schedule", schedule, "--virtual-stages", str(v)]
    if src == "N21":
        args += ["--zero", "0", "--recompute", "full", "--sequence-parallel=false"]
        published_s = n21_flops(batch, layers, h) / (gpus * pub * 1e12)
    elif src == "K22":
        args += ["--zero", "0", "--recompute", "selective", "--sequence-parallel"]
        published_s = pub
    elif src == "K22F":
        args += ["--zero", "0", "--recompute", "full", "--sequence-parallel=false"]
        published_s = pub
    else:
        # The distributed optimizer (ZeRO-1), no cp; --tp-comm-overlap needs SP (tp > 1).
        args += ["--zero", "1", "--cp", "1"] + (["--sequence-parallel"] if tp > 1 else [])
        published_s = mc24_flops(batch, layers, h) / (gpus * pub * 1e12)
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        return published_s, None, p.stderr.strip()
    c = json.loads(p.stdout)["candidates"][0]
    lay = c["layout"]
    return (published_s, c["predicted"]["step_time_s"],
            f"mb {lay['micro_batch']} {lay['schedule']} v{lay['virtual_stages']}")


def software(src):
    return {"N21": "megatron-lm-2021", "K22": "megatron-lm-2022", "K22F": "megatron-lm-2022",
            "MC24": "megatron-core-2024"}[src]


def hardware_preset(src):
    return "h100-80gb" if src == "MC24" else "a100-80gb"


A100_SOURCES = ("N21", "K22", "K22F")  # the a100 rows


def ablate(binary):
    """Each mechanism switched off in turn (the runs' stated layouts): mean |error|, max and
    signed mean, per paper."""
    runs = [run for run in RUNS if run[0] in A100_SOURCES]
    preset = [predict(binary, lambda src: ["--hardware", "a100-80gb", "--software",
                                           software(src)], run) for run in runs]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'switched off':34} " + "   ".join(
            f"{src + ' mean':>9} {'max':>6} {'signed':>7}" for src in A100_SOURCES))
        for label, extra, sms in ABLATIONS:
            def hardware(src):
                path = os.path.join(tmp, software(src) + ".toml")
                with open(path, "w") as f:
                    f.write(a100_toml(sms, software(src), extra))
                return ["--hardware-file", path]
            errs = {src: [] for src in A100_SOURCES}
            for run, ref in zip(runs, preset):
                pub, pred, _ = predict(binary, hardware, run)
                if label == "nothing" and ((pred is None) != (ref[1] is None) or (
                        pred is not None and abs(pred / ref[1] - 1) > 1e-9)):
                    sys.exit(f"the a100 copy in this script no longer matches the preset "
                             f"({run[1]}: {pred} vs {ref[1]}); update A100_TOML")
                if pred is not None:
                    errs[run[0]].append(pred / pub - 1)
            cells = []
            for src in A100_SOURCES:
                e = errs[src]
                cells.append(f"{sum(map(abs, e)) / len(e):9.1%} {max(map(abs, e)):6.1%} "
                             f"{sum(e) / len(e):+7.1%}")
            print(f"{label:34} " + "   ".join(cells))
    ablate_h100(binary)


def ablate_h100(binary):
    """megatron-core-2024's mechanisms switched off in turn on the MC24 rows (searched: the
    runs' micro-batch and schedule are not published): mean |error|, max, signed mean."""
    runs = [run for run in RUNS if run[0] == "MC24"]
    preset = [predict(binary, lambda src: ["--hardware", "h100-80gb", "--software",
                                           software(src)], run) for run in runs]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"\n{'switched off (MC24, h100-80gb)':34} {'mean':>9} {'max':>6} {'signed':>7}"
              f"   per row")
        for label, extra, sms in H100_ABLATIONS:
            path = os.path.join(tmp, "h100.toml")
            with open(path, "w") as f:
                f.write(a100_toml(sms, "megatron-core-2024", extra, H100_TOML))
            errs = []
            for run, ref in zip(runs, preset):
                pub, pred, _ = predict(binary, lambda src: ["--hardware-file", path], run)
                if label == "nothing" and abs(pred / ref[1] - 1) > 1e-9:
                    sys.exit(f"the h100 copy in this script no longer matches the preset "
                             f"({run[1]}: {pred} vs {ref[1]}); update H100_TOML")
                errs.append(pred / pub - 1)
            rows = " ".join(f"{e:+.1%}" for e in errs)
            print(f"{label:34} {sum(map(abs, errs)) / len(errs):9.1%} "
                  f"{max(map(abs, errs)):6.1%} {sum(errs) / len(errs):+7.1%}   {rows}")


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build/meshtrain"
    if "--ablate" in sys.argv[2:]:
        return ablate(binary)
    preset = lambda s: ["--hardware", hardware_preset(s), "--software", software(s)]  # noqa: E731
    errors = {True: [], False: []}
    by_src = {}
    print(f"{'src':4} {'model':8} {'GPUs':>5} {'published s':>12} {'stated layout':>24} "
          f"{'searched':>24}  searched layout")
    for run in RUNS:
        src, name, gpus = run[0], run[1], run[7]
        cells, note = [], ""
        for stated in (True, False):
            published_s, pred, lay = predict(binary, preset, run, stated)
            if pred is None:
                cells.append(f"{'does not fit':>24}")
                note = lay
                continue
            err = pred / published_s - 1
            errors[stated].append(abs(err))
            by_src.setdefault((src, stated), []).append(abs(err))
            cells.append(f"{pred:15.3f} ({err:+.1%})")
            note = lay
        print(f"{src:4} {name:8} {gpus:5d} {published_s:12.3f} {cells[0]:>24} {cells[1]:>24}  "
              f"{note}")
    for (src, stated), e in by_src.items():
        if stated:
            print(f"  {src}: stated layout mean |error| {sum(e) / len(e):.1%}, max {max(e):.1%}; "
                  f"searched {sum(by_src[(src, False)]) / len(e):.1%}, max "
                  f"{max(by_src[(src, False)]):.1%} over {len(e)} runs")
    for stated, label in ((True, "stated layout"), (False, "searched")):
        e = errors[stated]
        if e:
            print(f"{label}: mean |error| {sum(e) / len(e):.1%}, max {max(e):.1%} over {len(e)} "
                  f"runs (goal: mean <= 5%, max <= 10%)")


if __name__ == "__main__":
    main()
