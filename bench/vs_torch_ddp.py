#!/usr/bin/python3
"""meshtrain --dp 2 against PyTorch DistributedDataParallel (gloo), side by side.

Both train the same GPT (the same init file, the same token shard, the same global batch
split in two halves, AdamW with the same groups and schedule: tests/reference/gpt_torch.py
is PyTorch's side), 2 processes (meshtrain: 2 ranks as threads), 1 compute thread each.
Rounds alternate the two programs, and which of them goes first (meshtrain first in odd
rounds, PyTorch first in even ones), so a change of the machine's load, or whatever the
previous program left behind, hits both alike; the ratio is taken round by round (PyTorch
ms/step over meshtrain ms/step, medians of the steps after the warm-up). Each round line
gives the load average when it started and both sides' fastest and slowest measured step.

What a step is, on both sides the same kind of time: rank 0's wall time from the start of
its step (the batch's read) to the end of its optimizer update, between the steps of one
process (no start-up, no process launch, no logging). PyTorch: time.perf_counter() around
gpt_torch.train_step after a barrier of the two ranks. meshtrain: its metrics' step_time_s,
rank 0's clock from its batch's read to the end of its update (train/step.cpp). meshtrain's
ranks do not meet before a step: when rank 0 starts ahead of rank 1 it waits for it inside
the step (at the gradient reduction), a skew that PyTorch's barrier keeps out of its figure
(rank 0 also writes the metrics between steps, about 0.05 ms, which delays it, not rank 1).
`meshtrain bench step --breakdown`'s "step" is the same step_time_s (its mean over the
steps after the first).

Exposed communication:
  meshtrain  comm_exposed_s of its metrics (the compute thread blocked on dp traffic);
  PyTorch    DDP's step time minus the same step under DDP's no_sync() (no all-reduce),
             the two kinds of step alternating in one run.

PyTorch runs on OpenBLAS with OPENBLAS_CORETYPE=SKYLAKEX and OPENBLAS_NUM_THREADS=1. When
the system BLAS is not OpenBLAS, libopenblas0-pthread is unpacked into the build directory
(apt-get download + dpkg-deb -x, as bench_vs_pytorch.sh does) and PyTorch gets it through
LD_LIBRARY_PATH; the output says which BLAS ran.

--precision bf16: meshtrain --precision bf16 against DDP under torch.autocast("cpu",
bfloat16) (the forward only, as gpt_torch.py does).

  /usr/bin/python3 bench/vs_torch_ddp.py [--meshtrain build/meshtrain] [--precision fp32|bf16]
      [--layers 4 --dim 256 --heads 8 --seq 128 --batch 8] [--steps 12] [--warmup-steps 3]
      [--rounds 3] [--zero 0|1|2]
--zero: meshtrain's ZeRO stage (default 0, DDP's own layout: every rank holds and updates all
the weights and moments); PyTorch's side stays plain DDP. The header line names the stage.
Goals (issue #33): fp32 >= 1.4x in every round; bf16 >= 3x against DDP with autocast.
"""
import argparse
import glob
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
TORCH_PY = "/usr/bin/python3"


# ------------------------------------------------------------------ PyTorch's side (one rank)


def ddp_worker(a):
    """Runs in each of the two PyTorch processes: DDP steps alternating with no_sync steps."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import gpt_torch as ref

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=a.worker_rank, world_size=2)
    args = ref.train_parser(argparse.ArgumentParser()).parse_args(
        ["--data", a.data, "--init-from", a.init] + model_flags(a) + optim_flags(a)
        + ["--batch", str(a.batch // 2), "--precision", a.precision])
    model = DDP(ref.build_model(args))
    opt = ref.make_optimizer(model.module, args)
    half = a.batch // 2

    class RankLoader:  # the global batch's rows of this rank, as meshtrain's dp splits it
        def __init__(self):
            self.inner = ref.Loader(ref.read_shard(a.data), a.batch, a.seq)

        def next_batch(self):
            x, y = self.inner.next_batch()
            r = a.worker_rank
            return x[r * half:(r + 1) * half], y[r * half:(r + 1) * half]

    loader = RankLoader()
    times = {"sync": [], "no_sync": []}
    for u in range(2 * a.steps):
        kind = "sync" if u % 2 == 0 else "no_sync"
        dist.barrier()
        t0 = time.perf_counter()
        if kind == "sync":
            ref.train_step(model, opt, loader, u // 2, args)
        else:
            with model.no_sync():
                ref.train_step(model, opt, loader, u // 2, args)
        times[kind].append(time.perf_counter() - t0)
    if a.worker_rank == 0:
        with open(a.out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


# ------------------------------------------------------------------ the driver


def model_flags(a):
    return ["--layers", str(a.layers), "--dim", str(a.dim), "--heads", str(a.heads),
            "--seq", str(a.seq), "--vocab", str(a.vocab)]


def optim_flags(a):
    return ["--steps", str(a.steps), "--lr", "6e-4", "--min-lr", "6e-5", "--warmup", "2",
            "--lr-schedule", "cosine", "--weight-decay", "0.1", "--grad-clip", "1.0"]


def openblas_dir(build):
    """(directory for LD_LIBRARY_PATH or None, a sentence saying which BLAS PyTorch gets)."""
    system = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    if "openblas" in system:
        return None, f"system OpenBLAS ({system})"
    ob = os.path.join(build, "openblas", "usr", "lib", "x86_64-linux-gnu", "openblas-pthread")
    if not os.path.exists(os.path.join(ob, "libblas.so.3")):
        deb_dir = os.path.join(build, "openblas-deb")
        os.makedirs(deb_dir, exist_ok=True)
        print("vs_torch_ddp: the system BLAS is not OpenBLAS; unpacking libopenblas0-pthread "
              f"into {build}/openblas (apt-get download, dpkg-deb -x)", flush=True)
        subprocess.run(["apt-get", "download", "libopenblas0-pthread"], cwd=deb_dir,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for deb in glob.glob(os.path.join(deb_dir, "libopenblas0-pthread_*.deb")):
            subprocess.run(["dpkg-deb", "-x", deb, os.path.join(build, "openblas")], check=True)
    if os.path.exists(os.path.join(ob, "libblas.so.3")):
        return ob, f"OpenBLAS (libopenblas0-pthread, unpacked in {ob}), via LD_LIBRARY_PATH"
    return None, f"NOT OpenBLAS: libopenblas0-pthread could not be fetched; system BLAS {system}"


def run_torch(a, d, blas):
    out = os.path.join(d, "ddp.json")
    env = dict(os.environ, OPENBLAS_CORETYPE="SKYLAKEX", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    if blas:
        env["LD_LIBRARY_PATH"] = blas
    procs = [subprocess.Popen([TORCH_PY, os.path.abspath(__file__), "--worker-rank", str(r),
                               "--out", out, "--data", a.data, "--init", a.init]
                              + passthrough(a), env=env)
             for r in range(2)]
    if any(p.wait() != 0 for p in procs):
        sys.exit("vs_torch_ddp: a PyTorch rank failed")
    with open(out) as f:
        t = json.load(f)
    measured = t["sync"][a.warmup_steps:]
    sync = statistics.median(measured)
    no_sync = statistics.median(t["no_sync"][a.warmup_steps:])
    return sync, max(0.0, sync - no_sync), (min(measured), max(measured))


def run_meshtrain(a, d):
    metrics = os.path.join(d, "mt.jsonl")
    cmd = ([a.meshtrain, "train", "--dp", "2", "--threads", "1", "--batch", str(a.batch),
            "--data", a.data, "--init-from", a.init, "--precision", a.precision, "--quiet",
            "--metrics", metrics, "--zero", str(a.zero)] + model_flags(a) + optim_flags(a))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {shlex.join(cmd)}\n{p.stdout[-3000:]}")
    recs = [json.loads(l) for l in open(metrics) if l.strip()]
    recs = [r for r in recs if "step" in r][a.warmup_steps:]
    measured = [r["step_time_s"] for r in recs]
    step = statistics.median(measured)
    exposed = statistics.median(r.get("comm_exposed_s", 0.0) for r in recs)
    return step, exposed, (min(measured), max(measured)), shlex.join(cmd)


def span(lo_hi):
    """The fastest and the slowest measured step, in ms."""
    return f"steps {lo_hi[0] * 1e3:.1f}-{lo_hi[1] * 1e3:.1f}"


def passthrough(a):
    return (["--precision", a.precision, "--steps", str(a.steps), "--batch", str(a.batch),
             "--layers", str(a.layers), "--dim", str(a.dim), "--heads", str(a.heads),
             "--seq", str(a.seq), "--vocab", str(a.vocab)])


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="global batch (each rank: half)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--zero", type=int, default=0, choices=[0, 1, 2],
                    help="meshtrain's ZeRO stage (PyTorch's side stays plain DDP)")
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--worker-rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--init", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps <= a.warmup_steps:
        ap.error("--steps must exceed --warmup-steps")
    if a.batch % 2:
        ap.error("--batch must be even (two ranks)")
    return a


def main():
    a = parse()
    if a.worker_rank is not None:
        return ddp_worker(a)
    import numpy as np
    import gpt_torch as ref
    blas, blas_said = openblas_dir(os.path.dirname(os.path.abspath(a.meshtrain)))
    load = os.getloadavg()[0]
    print(f"vs_torch_ddp: {a.precision}, {a.layers}L d{a.dim} h{a.heads} T{a.seq} "
          f"B{a.batch} (2 x {a.batch // 2}), 2 processes x 1 thread, meshtrain ZeRO {a.zero}; "
          f"PyTorch BLAS: {blas_said}, "
          f"OPENBLAS_CORETYPE=SKYLAKEX; load average {load:.1f} at start"
          + (" (LOADED machine)" if load > 1.5 else ""), flush=True)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="mt_ddp_") as d:
        a.data, a.init = os.path.join(d, "train.bin"), os.path.join(d, "init.safetensors")
        ref.write_shard(a.data, np.random.default_rng(0).integers(0, a.vocab, 200_000))
        model = ref.GPT(a.layers, a.dim, a.heads, a.seq, a.vocab)
        ref.init_weights(model, 1)
        ref.save_safetensors(a.init, model.named_arrays())
        for rnd in range(a.rounds):
            load = os.getloadavg()[0]
            if rnd % 2 == 0:
                mt, mt_exp, mt_span, cmd = run_meshtrain(a, d)
                pt, pt_exp, pt_span = run_torch(a, d, blas)
            else:
                pt, pt_exp, pt_span = run_torch(a, d, blas)
                mt, mt_exp, mt_span, cmd = run_meshtrain(a, d)
            ratios.append(pt / mt)
            print(f"round {rnd + 1} ({'meshtrain' if rnd % 2 == 0 else 'PyTorch'} first, "
                  f"load {load:.1f}): meshtrain {mt * 1e3:7.1f} ms/step ({span(mt_span)}; "
                  f"exposed comm {mt_exp * 1e3:5.2f} ms, {mt_exp / mt:5.1%}) | DDP "
                  f"{pt * 1e3:7.1f} ms/step ({span(pt_span)}; exposed comm "
                  f"{pt_exp * 1e3:5.2f} ms, {pt_exp / pt:5.1%}) | ratio {pt / mt:.2f}x",
                  flush=True)
    goal = 1.4 if a.precision == "fp32" else 3.0
    print(f"meshtrain: {cmd}")
    print(f"ratio: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x over "
          f"{len(ratios)} rounds (goal >= {goal}x in every round: "
          f"{'met' if min(ratios) >= goal else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
