#!/usr/bin/python3
"""Black-box bisection of a meshtrain/PyTorch mismatch at the initial weights.

Runs one step of meshtrain (tiny lr, so the export is the init) on variants of one init
file in which parts of the network are switched off by zeroing output projections, and
compares step 1's loss and grad_norm with the PyTorch reference on the same variant:

  embed+head   every block is the identity (attn and mlp c_proj zero): embedding, ln_f,
               tied head, cross-entropy
  attn only    mlp c_proj zero
  mlp only     attn c_proj zero
  full         the init as is

The first variant that disagrees names the part to look at.
Usage: diagnose.py MESHTRAIN [--layers 1 --dim 32 --heads 2 --seq 32 --vocab 256 --batch 4]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch as ref  # noqa: E402


def zeroed(W, parts):
    W = {k: v.copy() for k, v in W.items()}
    for k in W:
        if any(f".{p}.c_proj." in k for p in parts):
            W[k][...] = 0
    return W


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("meshtrain")
    for f, v in (("layers", 1), ("dim", 32), ("heads", 2), ("seq", 32), ("vocab", 256),
                 ("batch", 4), ("microbatches", 1), ("threads", 1)):
        ap.add_argument("--" + f, type=int, default=v)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(prefix="mt_diag_")
    d = tmp.name
    model = ref.GPT(a.layers, a.dim, a.heads, a.seq, a.vocab)
    ref.init_weights(model, 3)
    W0 = model.named_arrays()
    data = os.path.join(d, "train.bin")
    ref.write_shard(data, np.random.default_rng(0).integers(0, a.vocab, 20000))
    x, y = ref.Loader(ref.read_shard(data), a.batch, a.seq).next_batch()
    print(f"{'variant':<12} {'loss mt':>11} {'loss torch':>11} {'rel':>9} {'norm mt':>10} "
          f"{'norm torch':>10} {'rel':>9}")
    for name, parts in (("embed+head", ("attn", "mlp")), ("attn only", ("mlp",)),
                        ("mlp only", ("attn",)), ("full", ())):
        W = zeroed(W0, parts)
        init = os.path.join(d, "init.safetensors")
        ref.save_safetensors(init, W)
        metrics = os.path.join(d, "m.jsonl")
        cmd = [a.meshtrain, "train", "--layers", str(a.layers), "--dim", str(a.dim),
               "--heads", str(a.heads), "--seq", str(a.seq), "--vocab", str(a.vocab),
               "--batch", str(a.batch), "--microbatches", str(a.microbatches), "--steps", "1",
               "--lr", "1e-30", "--min-lr", "0", "--warmup", "0", "--lr-schedule", "constant",
               "--threads", str(a.threads), "--grad-clip", "1e9", "--data", data,
               "--data-order", "sequential",
               "--init-from", init, "--metrics", metrics]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode:
            print(f"{name:<12} meshtrain exited {p.returncode}: {p.stdout.strip()[-300:]}")
            continue
        with open(metrics) as f:
            rec = [json.loads(line) for line in f if "event" not in line][0]
        m = ref.GPT(a.layers, a.dim, a.heads, a.seq, a.vocab)
        m.load_named(W)
        mb = a.batch // a.microbatches
        loss = 0.0
        for j in range(a.microbatches):
            lj = m(x[j * mb:(j + 1) * mb], y[j * mb:(j + 1) * mb]) / a.microbatches
            lj.backward()
            loss += lj.item()
        norm = torch.norm(torch.stack([p.grad.norm() for p in m.parameters()])).item()
        print(f"{name:<12} {rec['loss']:>11.7f} {loss:>11.7f} {abs(rec['loss'] - loss) / loss:>9.2e} "
              f"{rec['grad_norm']:>10.6f} {norm:>10.6f} {abs(rec['grad_norm'] - norm) / norm:>9.2e}")


if __name__ == "__main__":
    main()
