#!/usr/bin/env python3
"""Layout-equivalence harness: runs the meshtrain binary under several parallel layouts and
checks that each computes what one worker computes (docs/architecture.md, correctness stance).

A layout is just extra flags ("--dp 4 --zero 3", later "--tp 2", "--pp 2 --schedule 1f1b"),
optionally with a launcher prefix ("mpirun -np 4 ... {bin} train --backend mpi").

  compare  per-step losses (metrics JSONL) within --loss-rtol and exported weights
           (safetensors, per-tensor relative L2 error) within --weight-rtol of the reference
           run; --repeat also checks the first layout twice for bitwise-identical losses.
           Validation losses (val_loss, when the base asks for --eval-every) are compared
           like the losses; --grad-norm-rtol R also each step's gradient norm; --sample N also compares the final N-token sample, text for text;
           --init-steps K first trains K steps on one worker and exports the weights, and
           every run then starts from them (--init-from).
  resume   a run saved at step K under one layout, resumed under another, continues with the
           losses of the uninterrupted reference run.
  reshard  sharded checkpoints (--checkpoint-format sharded): a run saved at step K under one
           layout; `meshtrain export --from` of its step directory equals the saver's own
           --export exactly; the run resumed under another layout continues with the losses
           and weights of the uninterrupted reference run (tolerance 0 for a same-layout pair
           against a reference of that layout: bit-exact resume).
  memory   the {"event": "memory"} records against the ZeRO model-state formulas.

Exit status 0 on success, 1 on any mismatch (with a line naming layout, step and values).
"""
import argparse
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile

import numpy as np


def run(args, layout, workdir, tag, extra, launch=True, export_weights=True):
    """Runs one training job; returns (losses per step, metrics records, export path).
    The launcher applies to the layouts under test, never to the reference."""
    metrics = os.path.join(workdir, tag + ".jsonl")
    export = os.path.join(workdir, tag + ".safetensors")
    flags = shlex.split(args.base) + shlex.split(layout) + extra
    flags += ["--metrics", metrics]
    # The sample is printed by the progress output, which --quiet silences.
    flags += ["--sample-tokens", str(args.sample)] if args.sample else ["--quiet"]
    if export_weights:
        flags += ["--export", export]
    cmd = [args.bin, "train"] + flags
    if args.launcher and launch:
        cmd = shlex.split(args.launcher.replace("{bin}", args.bin)) + ["train"] + flags
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace", env=env,
                       timeout=args.timeout)
    if p.returncode != 0:
        print(f"FAIL [{layout}]: exit {p.returncode}\n  cmd: {shlex.join(cmd)}\n{p.stderr[-2000:]}")
        sys.exit(1)
    records = [json.loads(line) for line in open(metrics)]
    losses = {r["step"]: r["loss"] for r in records if "step" in r and "loss" in r}
    if args.sample:
        run.last_sample = sample_text(p.stdout)
    return losses, records, export


def sample_text(stdout):
    """The text between the '---- sample' line and the closing '----' line."""
    lines = stdout.split("\n")
    begin = [i for i, line in enumerate(lines) if line.startswith("---- sample")]
    if not begin:
        return None
    end = lines.index("----", begin[-1] + 1)
    return "\n".join(lines[begin[-1] + 1:end])


def grad_norms(records):
    return {r["step"]: r["grad_norm"] for r in records if "step" in r and "grad_norm" in r}


def val_losses(records):
    return {r["step"]: r["val_loss"] for r in records if "val_loss" in r}


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=np.float32).reshape(t["shape"])
    return out


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def check_losses(ref, got, rtol, layout, first_step=1):
    bad = 0
    for step in sorted(ref):
        if step < first_step:
            continue
        if step not in got:
            print(f"FAIL [{layout}]: no loss for step {step}")
            return 1
        if rel(got[step], ref[step]) > rtol:
            print(f"FAIL [{layout}]: step {step} loss {got[step]!r} vs reference {ref[step]!r} "
                  f"(rel {rel(got[step], ref[step]):.2e} > {rtol:.0e})")
            bad += 1
    return bad


def drop_rows(tensors, specs):
    """--drop-rows NAME:START:COUNT: rows whose exact gradient is zero (the gpt2 key bias:
    softmax ignores a shift shared by every key), so Adam turns rounding noise, which differs
    between two correct attention kernels, into full-size steps; they are left out."""
    for spec in specs:
        name, start, count = spec.rsplit(":", 2)
        start, count = int(start), int(count)
        if name in tensors:
            t = tensors[name]
            tensors[name] = np.concatenate([t[:start], t[start + count:]])
    return tensors


def check_weights(ref_path, got_path, rtol, layout, dropped=()):
    ref = drop_rows(read_safetensors(ref_path), dropped)
    got = drop_rows(read_safetensors(got_path), dropped)
    if sorted(ref) != sorted(got):
        print(f"FAIL [{layout}]: tensor names differ: {sorted(set(ref) ^ set(got))}")
        return 1
    worst, bad = ("", 0.0), 0
    for name in ref:
        if ref[name].shape != got[name].shape:
            print(f"FAIL [{layout}]: {name} shape {got[name].shape} vs {ref[name].shape}")
            bad += 1
            continue
        r = ref[name].astype(np.float64)
        e = np.linalg.norm(got[name] - r) / max(np.linalg.norm(r), 1e-30)
        if e > worst[1]:
            worst = (name, e)
        if e > rtol:
            print(f"FAIL [{layout}]: {name} relative L2 error {e:.2e} > {rtol:.0e}")
            bad += 1
    print(f"  weights: worst {worst[0]} {worst[1]:.2e}")
    return bad


def cmd_compare(args, workdir):
    if args.init_steps:
        _, _, init = run(args, "", workdir, "init", ["--steps", str(args.init_steps)],
                         launch=False)
        args.base += " --init-from " + shlex.quote(init)
    ref, ref_records, ref_w = run(args, args.reference, workdir, "ref", [], launch=False)
    ref_val, ref_sample = val_losses(ref_records), getattr(run, "last_sample", None)
    print(f"reference [{args.reference}]: {len(ref)} steps, final loss {ref[max(ref)]:.6f}")
    if args.sample and ref_sample is None:
        print("FAIL [reference]: printed no sample")
        return 1
    bad = 0
    for i, layout in enumerate(args.layout):
        got, records, got_w = run(args, layout, workdir, f"l{i}", [],
                                  export_weights=not args.losses_only)
        worst = max(rel(got.get(s, float("nan")), ref[s]) for s in ref)
        print(f"layout [{layout}]: worst loss rel {worst:.2e}")
        bad += check_losses(ref, got, args.loss_rtol, layout)
        if args.grad_norm_rtol is not None:
            ref_norms = grad_norms(ref_records)
            worst = max(rel(grad_norms(records).get(s, float("nan")), ref_norms[s]) for s in ref_norms)
            print(f"  grad_norm: worst rel {worst:.2e}")
            bad += check_losses(ref_norms, grad_norms(records), args.grad_norm_rtol,
                                layout + " grad_norm")
        if ref_val:
            print(f"  val_loss at steps {sorted(ref_val)}")
            bad += check_losses(ref_val, val_losses(records), args.loss_rtol, layout + " val_loss")
        if args.sample:
            if run.last_sample != ref_sample:
                print(f"FAIL [{layout}]: sample {run.last_sample!r} vs reference {ref_sample!r}")
                bad += 1
            else:
                print(f"  sample: identical ({len(ref_sample)} characters)")
        if not args.losses_only:
            bad += check_weights(ref_w, got_w, args.weight_rtol, layout, args.drop_rows)
        if args.repeat and i == 0:
            again, _, _ = run(args, layout, workdir, f"l{i}_again", [],
                              export_weights=not args.losses_only)
            if again != got:
                print(f"FAIL [{layout}]: a second identical run gave different losses")
                bad += 1
            else:
                print("  repeat: bitwise identical losses")
    return bad


def cmd_resume(args, workdir):
    ref, _, _ = run(args, args.reference, workdir, "ref", [], launch=False)
    bad = 0
    for i, pair in enumerate(args.pair):
        saver, loader = pair.split("|")
        ckpt = os.path.join(workdir, f"ckpt{i}")
        steps = ["--steps", str(args.save_at)]
        run(args, saver, workdir, f"save{i}", steps + ["--save", ckpt])
        got, _, _ = run(args, loader, workdir, f"load{i}", ["--load", ckpt])
        print(f"save [{saver}] at step {args.save_at} -> load [{loader}]")
        bad += check_losses(ref, got, args.loss_rtol, f"{saver} -> {loader}",
                            first_step=args.save_at + 1)
    return bad


def cmd_reshard(args, workdir):
    ref, _, ref_w = run(args, args.reference, workdir, "ref", [], launch=False)
    bad = 0
    for i, pair in enumerate(args.pair):
        saver, loader = pair.split("|")
        ckpt = os.path.join(workdir, f"sharded{i}")
        step_dir = os.path.join(ckpt, "step_%06d" % args.save_at)
        _, _, saved_w = run(args, saver, workdir, f"rsave{i}",
                            ["--steps", str(args.save_at), "--checkpoint-format", "sharded",
                             "--save", ckpt])
        exported = os.path.join(workdir, f"rexport{i}.safetensors")
        p = subprocess.run([args.bin, "export", "--from", step_dir, "--to", exported],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL [{saver}]: export --from exit {p.returncode}: {p.stderr[-500:]}")
            bad += 1
            continue
        a, b = read_safetensors(saved_w), read_safetensors(exported)
        if sorted(a) != sorted(b) or any(not np.array_equal(a[n], b[n]) for n in a):
            print(f"FAIL [{saver}]: export --from differs from the saver's own export")
            bad += 1
        got, _, got_w = run(args, loader, workdir, f"rload{i}", ["--load", step_dir])
        print(f"sharded save [{saver}] at step {args.save_at} -> load [{loader}]")
        bad += check_losses(ref, got, args.loss_rtol, f"{saver} -> {loader}",
                            first_step=args.save_at + 1)
        bad += check_weights(ref_w, got_w, args.weight_rtol, f"{saver} -> {loader}",
                             args.drop_rows)
    return bad


def cmd_memory(args, workdir):
    bad = 0
    for i, layout in enumerate(args.layout):
        _, records, export = run(args, layout, workdir, f"m{i}", [])
        tensors = read_safetensors(export)
        psi = sum(t.size for t in tensors.values())
        block = sum(t.size for k, t in tensors.items() if k.startswith("transformer.h.0."))
        edge = sum(t.size for k, t in tensors.items() if not k.startswith("transformer.h."))
        flags = shlex.split(layout)
        n = int(flags[flags.index("--dp") + 1]) if "--dp" in flags else 1
        z = int(flags[flags.index("--zero") + 1]) if "--zero" in flags else 0
        expect = {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n,
                  3: 16 * psi / n}[z]
        mem = [r for r in records if r.get("event") == "memory"]
        if len(mem) != n:
            print(f"FAIL [{layout}]: {len(mem)} memory records for {n} ranks")
            bad += 1
        for r in mem:
            buffers = r["gather_buffer_bytes"] + r["grad_buffer_bytes"]
            state = r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"] - buffers
            e = rel(state, expect)
            print(f"layout [{layout}] rank {r['rank']}: model state {state} B vs formula "
                  f"{expect:.0f} B (rel {e:.3f}), buffers {buffers} B")
            if e > 0.05:
                print(f"FAIL [{layout}]: rank {r['rank']} model state off the formula by {e:.1%}")
                bad += 1
            # ZeRO-3 holds the edge unit (tied wte) and two block buffers (current + prefetch).
            limit = 1.05 * 4 * (edge + 2 * block)
            if z == 3 and not 0 < r["gather_buffer_bytes"] <= limit:
                print(f"FAIL [{layout}]: gather buffers {r['gather_buffer_bytes']} B, expected "
                      f"at most {limit:.0f} B (edge unit + two layers)")
                bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["compare", "resume", "reshard", "memory"])
    ap.add_argument("--bin", required=True, help="the meshtrain binary")
    ap.add_argument("--base", default="", help="flags shared by every run (model, batch, steps)")
    ap.add_argument("--reference", default="", help="flags of the reference layout (default: one worker)")
    ap.add_argument("--layout", action="append", default=[], help="flags of a layout (repeatable)")
    ap.add_argument("--pair", action="append", default=[], help="resume: 'SAVER FLAGS|LOADER FLAGS'")
    ap.add_argument("--save-at", type=int, default=5)
    ap.add_argument("--launcher", default="", help="command prefix with {bin}, e.g. 'mpirun -np 2 {bin}'")
    ap.add_argument("--loss-rtol", type=float, default=1e-5)
    ap.add_argument("--weight-rtol", type=float, default=1e-4)
    ap.add_argument("--drop-rows", action="append", default=[],
                    help="NAME:START:COUNT: rows of a tensor left out of the weight comparison "
                         "(their exact gradient is zero; see drop_rows)")
    ap.add_argument("--grad-norm-rtol", type=float, default=None,
                    help="compare: also each step's gradient norm (off unless given)")
    ap.add_argument("--repeat", action="store_true", help="also check determinism")
    ap.add_argument("--losses-only", action="store_true",
                    help="compare per-step losses only (layouts that cannot export yet)")
    ap.add_argument("--sample", type=int, default=0,
                    help="compare: also compare the final sample of this many tokens")
    ap.add_argument("--init-steps", type=int, default=0,
                    help="compare: start every run from the weights of K one-worker steps")
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="mt_equiv_") as workdir:
        bad = {"compare": cmd_compare, "resume": cmd_resume, "reshard": cmd_reshard,
               "memory": cmd_memory}[args.mode](args, workdir)
    print("OK" if bad == 0 else f"{bad} mismatch(es)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
