#!/usr/bin/python3
"""Whole model vs PyTorch: meshtrain and the PyTorch reference (gpt_torch.py; llama_torch.py
for the --arch llama cases of llama_cases.py, which says what else they check) train from
the same safetensors init on the same token shard with the same flags; afterwards

  - every step's loss agrees within 1e-5 relative,
  - lr agrees within 1e-6 relative and grad_norm (before clipping) within 1e-4 relative,
  - every exported parameter agrees within 1e-4 relative: |mt - ref| / |ref| (L2 norms).

One exception: the key third of each attn.c_attn.bias. Adding a constant to every key
adds q.b to all scores of a query row, which the softmax ignores, so that gradient is 0
in exact math and pure rounding noise in float32; AdamW divides noise by its own RMS and
moves those entries by ~lr per step in directions no two implementations share (float64
against float32 PyTorch already differs there by ~5e-4 relative). The key bias has no
effect on the loss, so it is excluded from the norm comparison and only checked for
being bounded (|b_k| <= 3 * sum of lr).

bf16 cases (--precision bf16 against torch.autocast("cpu", dtype=torch.bfloat16) on the
same weights and data) have their own tolerances, set per case (BF16_TOLERANCES says why),
and one more check that they can fail: at step 1 (same weights, same batch) meshtrain
bf16's grad_norm must be closer to autocast's than meshtrain fp32's is, i.e. the test
sees the precision at all.

Usage: test_vs_torch.py MESHTRAIN [--case NAME ...] [--list] [--keep DIR]
                                  [--meshtrain-args "--dp 2 ..."] [--init-seed S]
Exits 1 with a diff table on mismatch, 2 on a harness error (meshtrain failed to run).
Timing keys are never compared.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gpt_torch as ref  # noqa: E402
import llama_cases  # noqa: E402
import llama_torch  # noqa: E402

NOISE = 0.2  # share of random tokens in the "markov" stream
LOSS_RTOL, LR_RTOL, NORM_RTOL, PARAM_RTOL = 1e-5, 1e-6, 1e-4, 1e-4
BF16_SELF_DIFF = 2e-6  # our bf16 vs our fp32: the least largest loss rel diff

# bf16 against autocast. Both round the GEMM and attention-product inputs to bf16
# (relative error up to u = 2^-8 per operand) and accumulate in fp32, but autocast also
# runs the softmax and GELU in bf16 where meshtrain keeps fp32, so the two are two
# different bf16 models, each within a few u of the fp32 one. The loss is a mean over
# B*T tokens, so per-element rounding averages out: 1e-2 relative (the figure,
# ~2.5u) leaves a wide margin over the ~1e-4 seen. The gradient norm and the weights are
# not averaged: rounding moves each gradient element by up to ~u relative and AdamW
# turns small gradients' noise into lr-sized steps, so the matrices after 10 steps are
# held to 5e-2 relative (L2; measured <= 1.8e-2) and the norm to 2e-2 (measured <= 1.1e-3).
# 1-D tensors (biases from 0, LayerNorms from 1 and 0) get 0.2: a bias is only ~10 Adam
# steps from zero, so one step taken the other way on a sign-noisy gradient element is a
# large share of its norm (measured <= 7.8e-2, max |diff| 1.9e-3 against lr 1e-3).
BF16_TOLERANCES = dict(loss_rtol=1e-2, norm_rtol=2e-2, param_rtol=5e-2, param_rtol_1d=0.2,
                       discriminate=True)

# Each case: model/train flags shared verbatim by both sides, plus how to build the data
# ("text": this directory's reference source as bytes; "markov": a noisy deterministic
# chain over the whole vocabulary) and an
# optional larger position table in the init file (seq < position table).
COMMON = ["--steps", "10", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8", "--seed", "1"]
CASES = {
    # 1 layer, byte vocab, warmup + cosine, clipping active.
    "l1_v256_clip": dict(
        flags=["--layers", "1", "--dim", "32", "--heads", "2", "--seq", "32", "--vocab", "256",
               "--batch", "4", "--microbatches", "1", "--lr", "1e-3", "--min-lr", "1e-4",
               "--warmup", "3", "--lr-schedule", "cosine", "--weight-decay", "0.1",
               "--grad-clip", "0.5", "--threads", "1"],
        data="text", must_clip=True),
    # Several layers, 4 heads, vocab 2048, 2 microbatches, 2 threads.
    "l3_v2048_mb2": dict(
        flags=["--layers", "3", "--dim", "128", "--heads", "4", "--seq", "32", "--vocab", "2048",
               "--batch", "8", "--microbatches", "2", "--lr", "1e-3", "--min-lr", "0",
               "--warmup", "2", "--lr-schedule", "cosine", "--weight-decay", "0.1",
               "--grad-clip", "1.0", "--threads", "2"],
        data="markov"),
    # --seq 16 with a 48-row position table in the init file: rows 16..47 get no gradient
    # but are kept, decayed (weight decay applies to the whole tensor) and exported.
    "l2_seq_lt_positions": dict(
        flags=["--layers", "2", "--dim", "32", "--heads", "4", "--seq", "16", "--vocab", "256",
               "--batch", "4", "--microbatches", "1", "--lr", "1e-3", "--min-lr", "1e-4",
               "--warmup", "1", "--lr-schedule", "cosine", "--weight-decay", "0.1",
               "--grad-clip", "1.0", "--threads", "1"],
        data="text", positions=48),
    # Constant LR without warmup or clipping, 8 heads of 16, data wrapping around twice.
    "l2_h8_const_wrap": dict(
        flags=["--layers", "2", "--dim", "128", "--heads", "8", "--seq", "64", "--vocab", "256",
               "--batch", "4", "--microbatches", "1", "--lr", "3e-4", "--min-lr", "0",
               "--warmup", "0", "--lr-schedule", "constant", "--weight-decay", "0.0",
               "--grad-clip", "0", "--threads", "1"],
        data="text", data_tokens=4 * 64 * 4 + 100),
    # A vocabulary above 65,536: the data is a version-2 shard (uint32 ids, docs/contracts.md
    # §10) over the whole vocabulary, ids up to 99,999.
    "l2_v100000_v2shard": dict(
        flags=["--layers", "2", "--dim", "32", "--heads", "2", "--seq", "16", "--vocab", "100000",
               "--batch", "4", "--microbatches", "2", "--lr", "1e-3", "--min-lr", "1e-4",
               "--warmup", "2", "--lr-schedule", "cosine", "--weight-decay", "0.1",
               "--grad-clip", "1.0", "--threads", "1"],
        data="markov", shard_version=2),
    # bf16 (see BF16_TOLERANCES): the byte-level case of 2 layers, and the vocab-2048 case
    # with 2 microbatches and 2 threads.
    "l2_bf16": dict(
        flags=["--layers", "2", "--dim", "64", "--heads", "4", "--seq", "32", "--vocab", "256",
               "--batch", "4", "--microbatches", "1", "--lr", "1e-3", "--min-lr", "1e-4",
               "--warmup", "2", "--lr-schedule", "cosine", "--weight-decay", "0.1",
               "--grad-clip", "1.0", "--threads", "1", "--precision", "bf16"],
        data="text", **BF16_TOLERANCES),
    "l3_v2048_bf16": dict(
        flags=["--layers", "3", "--dim", "128", "--heads", "4", "--seq", "32", "--vocab", "2048",
               "--batch", "8", "--microbatches", "2", "--lr", "1e-3", "--min-lr", "0",
               "--warmup", "2", "--lr-schedule", "cosine", "--weight-decay", "0.1",
               "--grad-clip", "1.0", "--threads", "2", "--precision", "bf16"],
        data="markov", **BF16_TOLERANCES),
}

# The --arch llama cases (llama_cases.py; they need a meshtrain with --arch).
CASES.update(llama_cases.cases(BF16_TOLERANCES))


def flag(flags, name):
    return flags[flags.index(name) + 1]


def make_inputs(case, d, init_seed):
    if llama_cases.is_llama(case):
        return llama_cases.make_inputs(case, d, init_seed, make_data)
    f = case["flags"]
    L, C, H, T, V = (int(flag(f, n)) for n in ("--layers", "--dim", "--heads", "--seq", "--vocab"))
    model = ref.GPT(L, C, H, T, V, positions=case.get("positions"))
    ref.init_weights(model, seed=init_seed)
    init = os.path.join(d, "init.safetensors")
    ref.save_safetensors(init, model.named_arrays())
    return init, make_data(case, V, d)


def make_data(case, V, d):
    if case["data"] == "text":
        with open(os.path.join(HERE, "gpt_torch.py"), "rb") as fh:
            toks = np.frombuffer(fh.read(), dtype=np.uint8).astype(np.int64)
    else:
        # A learnable stream over the whole vocabulary (mostly t -> 7t+3 mod V, 20% noise).
        # Uniform random tokens would make the true gradient near zero, i.e. sums of
        # cancelling terms whose float32 rounding Adam then amplifies: a fair test needs
        # gradients that carry signal.
        rng = np.random.default_rng(5)
        toks = np.empty(50_000, np.int64)
        toks[0] = 1
        noise = rng.random(len(toks)) < NOISE
        rand = rng.integers(0, V, len(toks))
        for i in range(1, len(toks)):
            toks[i] = rand[i] if noise[i] else (7 * toks[i - 1] + 3) % V
    toks = toks[:case.get("data_tokens", len(toks))]
    data = os.path.join(d, "train.bin")
    ref.write_shard(data, toks, ref.shard_version(V))
    with open(data, "rb") as fh:  # the case meant for a version-2 shard got one
        assert int.from_bytes(fh.read(8)[4:], "little") == case.get("shard_version", 1)
    return data


def read_metrics(path):
    recs = []
    with open(path) as fh:
        for line in fh:
            if line.strip():
                r = json.loads(line)
                if "event" not in r:
                    recs.append(r)
    return recs


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare(name, case, mt_recs, ref_recs, mt_w, ref_w):
    bad = []
    LOSS_RTOL = case.get("loss_rtol", globals()["LOSS_RTOL"])
    NORM_RTOL = case.get("norm_rtol", globals()["NORM_RTOL"])
    PARAM_RTOL = case.get("param_rtol", globals()["PARAM_RTOL"])
    steps = int(flag(COMMON, "--steps"))
    if [r.get("step") for r in mt_recs] != list(range(1, steps + 1)):
        bad.append(f"metrics steps are {[r.get('step') for r in mt_recs]}, want 1..{steps}")
    print(f"[{name}] per-step metrics (meshtrain vs torch, relative differences)")
    print(f"{'step':>4} {'loss mt':>12} {'loss torch':>12} {'rel':>9} {'lr rel':>9} "
          f"{'norm mt':>10} {'norm torch':>10} {'rel':>9}")
    for m, r in zip(mt_recs, ref_recs):
        dl, dlr, dn = rel(m["loss"], r["loss"]), rel(m["lr"], r["lr"]), rel(m["grad_norm"], r["grad_norm"])
        flags = ("L" if dl > LOSS_RTOL else "") + ("R" if dlr > LR_RTOL else "") + ("N" if dn > NORM_RTOL else "")
        print(f"{r['step']:>4} {m['loss']:>12.7f} {r['loss']:>12.7f} {dl:>9.2e} {dlr:>9.2e} "
              f"{m['grad_norm']:>10.6f} {r['grad_norm']:>10.6f} {dn:>9.2e} {flags}")
        if flags:
            bad.append(f"step {r['step']}: " + ", ".join(
                {"L": f"loss rel {dl:.2e} > {LOSS_RTOL}", "R": f"lr {m['lr']} vs {r['lr']}",
                 "N": f"grad_norm rel {dn:.2e} > {NORM_RTOL}"}[c] for c in flags))
    if case.get("must_clip") and not any(r["grad_norm"] > float(flag(case["flags"], "--grad-clip")) for r in ref_recs):
        bad.append("case meant to exercise clipping, but no step's grad_norm exceeded --grad-clip")

    missing, extra = sorted(set(ref_w) - set(mt_w)), sorted(set(mt_w) - set(ref_w))
    if missing or extra:
        bad.append(f"exported tensor names differ: missing {missing}, unexpected {extra}")
    rows = []
    for n in ref_w:
        if n not in mt_w:
            continue
        if mt_w[n].shape != ref_w[n].shape:
            bad.append(f"{n}: exported shape {mt_w[n].shape}, want {ref_w[n].shape}")
            continue
        a, b = mt_w[n].astype(np.float64), ref_w[n].astype(np.float64)
        if n.endswith("attn.c_attn.bias"):
            C = a.shape[0] // 3
            bound = 3 * sum(r["lr"] for r in ref_recs)
            kmax = np.abs(a[C:2 * C]).max()
            if not kmax <= bound:
                bad.append(f"{n}: key bias reached {kmax:.2e}, more than noise allows ({bound:.2e})")
            a, b = np.delete(a, np.s_[C:2 * C]), np.delete(b, np.s_[C:2 * C])
        e = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
        tol = PARAM_RTOL if mt_w[n].ndim >= 2 else case.get("param_rtol_1d", PARAM_RTOL)
        rows.append((e, n, np.abs(a - b).max(), tol))
    rows.sort(reverse=True)
    print(f"[{name}] parameters after {steps} steps, worst first (rel = |mt-ref|/|ref|)")
    for i, (e, n, mx, tol) in enumerate(rows):
        if i < 6 or e > tol:
            print(f"  {e:9.2e} {mx:9.2e} {n}{'  <-- over ' + str(tol) if e > tol else ''}")
        if e > tol:
            bad.append(f"{n}: parameter rel diff {e:.2e} > {tol}")
    return bad


def discriminate(name, cmd, mt_recs, ref_recs, d):
    """meshtrain fp32 on the same inputs: its step-1 grad_norm must be further from
    autocast's than meshtrain bf16's, or the bf16 tolerances could not tell the two apart."""
    fp32_metrics = os.path.join(d, "mt_fp32.jsonl")
    i = cmd.index("--precision")
    fcmd = cmd[:i] + cmd[i + 2:]
    fcmd[fcmd.index("--metrics") + 1] = fp32_metrics
    fcmd[fcmd.index("--export") + 1] = os.path.join(d, "mt_fp32.safetensors")
    p = subprocess.run(fcmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        return [f"meshtrain fp32 run failed ({p.returncode}): {p.stdout[-500:]}"]
    f32 = read_metrics(fp32_metrics)
    # Our own bf16 path must differ from our fp32 path by bf16 rounding (~1e-5 in the loss
    # here), not by fp32 reordering noise (~1e-7): whatever PyTorch does on this CPU.
    self_diff = max(rel(a["loss"], b["loss"]) for a, b in zip(mt_recs, f32))
    print(f"[{name}] meshtrain bf16 vs fp32: largest loss rel diff {self_diff:.2e}")
    if not self_diff > BF16_SELF_DIFF:
        return [f"meshtrain bf16 losses are within {self_diff:.2e} of meshtrain fp32's "
                f"(bf16 rounding gives > {BF16_SELF_DIFF:.0e}): the bf16 path looks like fp32"]
    # Closer to autocast than fp32 is: only where autocast's forward is itself bf16. PyTorch
    # 1.13's CPU autocast is not everywhere: on an AMX Xeon its step-1 loss sat 7e-7 from our
    # fp32 one (and 1.7e-5 from our bf16 one), so there it cannot tell the paths apart.
    t = ref_recs[0]["grad_norm"]
    e_bf16, e_fp32 = rel(mt_recs[0]["grad_norm"], t), rel(f32[0]["grad_norm"], t)
    autocast_fp32_like = rel(f32[0]["loss"], ref_recs[0]["loss"]) < BF16_SELF_DIFF
    print(f"[{name}] step-1 grad_norm vs autocast: meshtrain bf16 {e_bf16:.2e}, "
          f"meshtrain fp32 {e_fp32:.2e}" +
          ("; autocast's step-1 loss equals fp32's on this CPU, so this is not compared"
           if autocast_fp32_like else ""))
    if not autocast_fp32_like and not e_bf16 < e_fp32:
        return [f"step-1 grad_norm: bf16 ({e_bf16:.2e}) is not closer to autocast than fp32 "
                f"({e_fp32:.2e}): the bf16 path looks like fp32"]
    return []


def run_case(name, case, meshtrain, extra, keep, init_seed=None):
    if init_seed is None:
        init_seed = case.get("init_seed", 1234)
    llama = llama_cases.is_llama(case)
    if llama and not llama_cases.engine_has_arch(meshtrain):
        print(f"[{name}] HARNESS ERROR: {meshtrain} has no --arch (its `train --help` does not "
              "list it): this binary predates the Llama model of issue #32, so the case "
              "cannot run. (reference.cmake registers these cases only once src/cli has it.)")
        return None
    d = keep or tempfile.mkdtemp(prefix=f"mt_ref_{name}_")
    os.makedirs(d, exist_ok=True)
    init, data = make_inputs(case, d, init_seed)
    flags = COMMON + case["flags"] + ["--data", data, "--init-from", init]
    mt_out, mt_metrics = os.path.join(d, "mt.safetensors"), os.path.join(d, "mt.jsonl")
    # The reference reads batches in llm.c's order: meshtrain's default is a shuffled one.
    cmd = [meshtrain, "train"] + flags + ["--data-order", "sequential", "--export", mt_out,
                                          "--metrics", mt_metrics] + extra
    print(f"[{name}] $ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout[-4000:])
        print(f"[{name}] HARNESS ERROR: meshtrain exited with {p.returncode}")
        return None

    mod = llama_torch if llama else ref
    args = mod.train_parser(argparse.ArgumentParser()).parse_args(flags)
    args.threads = 1  # --threads is for meshtrain; PyTorch on 2 busy cores is far slower
    model, ref_recs = mod.train(args)
    ref.save_safetensors(os.path.join(d, "torch.safetensors"), model.named_arrays())
    with open(os.path.join(d, "torch.jsonl"), "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in ref_recs)
    try:
        mt_recs, mt_w = read_metrics(mt_metrics), ref.load_safetensors(mt_out)
    except (OSError, ValueError) as e:
        print(f"[{name}] HARNESS ERROR: cannot read meshtrain output: {e}")
        return None
    bad = compare(name, case, mt_recs, ref_recs, mt_w, model.named_arrays())
    if llama:
        bad += llama_cases.compare_routing(name, mt_recs, ref_recs)
    if "hf" in case:
        bad += llama_cases.hf_checks(name, case, init, data, mt_recs,
                                     case.get("loss_rtol", LOSS_RTOL))
    if case.get("discriminate"):
        bad += discriminate(name, cmd, mt_recs, ref_recs, d)
    if bad:
        print(f"[{name}] FAILED ({len(bad)} problems; files kept in {d}):")
        for b in bad[:30]:
            print("   " + b)
    else:
        print(f"[{name}] PASSED")
        if not keep:
            shutil.rmtree(d, ignore_errors=True)
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("meshtrain", nargs="?")
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep", help="write the files of (one) case into this directory")
    ap.add_argument("--meshtrain-args", default="", help="extra flags for meshtrain only (layouts)")
    ap.add_argument("--init-seed", type=int,
                    help="seed of the shared init file (default: the case's, else 1234)")
    a = ap.parse_args()
    if a.list:
        print("\n".join(CASES))
        return 0
    if not a.meshtrain:
        ap.error("the meshtrain binary is required")
    results = {n: run_case(n, CASES[n], a.meshtrain, shlex.split(a.meshtrain_args), a.keep,
                          a.init_seed)
               for n in (a.case or CASES)}
    if any(r is None for r in results.values()):
        return 2
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
