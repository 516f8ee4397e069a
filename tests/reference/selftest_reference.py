#!/usr/bin/python3
"""Checks the PyTorch reference (gpt_torch.py) against an independent float64 numpy
reading of docs/contracts.md, so a mistake in the reference cannot hide a mistake in the
engine. Needs no meshtrain binary. Exits non-zero on the first failed check."""
import math
import os
import sys
import tempfile
import types

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch as ref  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        failures.append(name)


def np_layernorm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)  # biased variance
    return (x - mu) / np.sqrt(var + 1e-5) * w + b


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def np_loss(W, idx, tgt, L, H):
    """Forward of docs/contracts.md §1 written from the text, per head with explicit loops."""
    B, T = idx.shape
    C = W["transformer.wte.weight"].shape[1]
    hd = C // H
    x = W["transformer.wte.weight"][idx] + W["transformer.wpe.weight"][np.arange(T)]
    for i in range(L):
        p = lambda n: W[f"transformer.h.{i}.{n}"]  # noqa: E731
        h = np_layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.c_attn.weight").T + p("attn.c_attn.bias")
        q, k, v = qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]
        out = np.zeros_like(q)
        for j in range(H):
            cols = slice(j * hd, (j + 1) * hd)
            s = q[..., cols] @ np.swapaxes(k[..., cols], 1, 2) / np.sqrt(hd)  # (B,T,T)
            s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[..., cols] = s @ v[..., cols]
        x = x + out @ p("attn.c_proj.weight").T + p("attn.c_proj.bias")
        h = np_layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        f = np_gelu(h @ p("mlp.c_fc.weight").T + p("mlp.c_fc.bias"))
        x = x + f @ p("mlp.c_proj.weight").T + p("mlp.c_proj.bias")
    x = np_layernorm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"])
    logits = x @ W["transformer.wte.weight"].T
    m = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - m).sum(-1)) + m[..., 0]
    picked = np.take_along_axis(logits, tgt[..., None], -1)[..., 0]
    return float((lse - picked).mean())


def perturb(model, seed):
    # Non-trivial biases and LayerNorm affines, so every term of the math is exercised.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)


def test_forward():
    L, C, H, T, V, B = 2, 32, 4, 16, 50, 3
    model = ref.GPT(L, C, H, T, V)
    ref.init_weights(model, 7)
    perturb(model, 8)
    W = {n: a.astype(np.float64) for n, a in model.named_arrays().items()}
    rng = np.random.default_rng(0)
    idx = rng.integers(0, V, (B, T))
    tgt = rng.integers(0, V, (B, T))
    got = model(torch.from_numpy(idx), torch.from_numpy(tgt)).item()
    want = np_loss(W, idx, tgt, L, H)
    check("forward loss vs numpy", abs(got - want) <= 1e-5 * abs(want), f"{got:.7f} {want:.7f}")
    # Gradient of one weight entry by central difference in float64 numpy.
    model.zero_grad()
    model(torch.from_numpy(idx), torch.from_numpy(tgt)).backward()
    for name, (r, c) in [("transformer.h.1.attn.c_attn.weight", (70, 5)),
                         ("transformer.wte.weight", (3, 9)),
                         ("transformer.h.0.mlp.c_fc.bias", (11, None))]:
        key = (r,) if c is None else (r, c)
        gt = dict(model.named_parameters())[name].grad[key].item()
        h = 1e-5
        Wp = {k: v.copy() for k, v in W.items()}
        Wp[name][key] += h
        lp = np_loss(Wp, idx, tgt, L, H)
        Wp[name][key] -= 2 * h
        lm = np_loss(Wp, idx, tgt, L, H)
        fd = (lp - lm) / (2 * h)
        check(f"grad {name}{list(key)} vs finite difference", abs(gt - fd) <= 1e-3 * abs(fd) + 1e-6,
              f"{gt:.6e} {fd:.6e}")


def test_loader():
    toks = np.arange(100)
    ld = ref.Loader(toks, B=2, T=10)  # 21 tokens per batch, advance 20
    starts = []
    for _ in range(6):
        x, y = ld.next_batch()
        starts.append(int(x[0, 0]))
        check_rows = all(int(x[s, 0]) == int(x[0, 0]) + 10 * s for s in range(2))
        if not (check_rows and torch.equal(y[:, :-1], x[:, 1:]) and int(y[1, -1]) == int(x[0, 0]) + 20):
            check("loader batch layout", False, str(x))
            return
    # pos 0, 20, 40, 60; at 80 the batch would need token 100 -> wrap to 0.
    check("loader order and wraparound", starts == [0, 20, 40, 60, 0, 20], str(starts))


def test_lr():
    a = types.SimpleNamespace(lr=1.0, min_lr=0.1, warmup=3, steps=10, lr_schedule="cosine")
    lrs = [ref.lr_at(u, a) for u in range(10)]
    want = [1 / 3, 2 / 3, 1.0] + [0.1 + 0.45 * (1 + math.cos(math.pi * k / 6)) for k in range(7)]
    check("lr warmup+cosine", np.allclose(lrs, want) and abs(lrs[-1] - 0.1) < 1e-12, str(np.round(lrs, 4)))
    a.lr_schedule, a.warmup = "constant", 0
    check("lr constant", all(ref.lr_at(u, a) == 1.0 for u in range(10)))


def test_adamw():
    # One group with decay and one without, two steps, against the textbook update.
    torch.manual_seed(0)
    w, b = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    model = torch.nn.Module()
    model.w, model.b = torch.nn.Parameter(w.detach().clone()), torch.nn.Parameter(b.detach().clone())
    args = types.SimpleNamespace(weight_decay=0.1, lr=0.01, beta1=0.9, beta2=0.95, eps=1e-8)
    opt = ref.make_optimizer(model, args)
    P = {"w": w.detach().double().numpy().copy(), "b": b.detach().double().numpy().copy()}
    m = {k: np.zeros_like(v) for k, v in P.items()}
    v = {k: np.zeros_like(x) for k, x in P.items()}
    for t in (1, 2):
        grads = {"w": np.full((4, 3), 0.3 * t), "b": np.linspace(-1, 1, 3) * t}
        model.w.grad = torch.tensor(grads["w"], dtype=torch.float32)
        model.b.grad = torch.tensor(grads["b"], dtype=torch.float32)
        opt.step()
        for k in P:
            wd = 0.1 if k == "w" else 0.0
            P[k] *= 1 - args.lr * wd
            m[k] = 0.9 * m[k] + 0.1 * grads[k]
            v[k] = 0.95 * v[k] + 0.05 * grads[k] ** 2
            mh, vh = m[k] / (1 - 0.9 ** t), v[k] / (1 - 0.95 ** t)
            P[k] -= args.lr * mh / (np.sqrt(vh) + 1e-8)
    ok = np.allclose(model.w.detach().numpy(), P["w"], atol=1e-6) and \
        np.allclose(model.b.detach().numpy(), P["b"], atol=1e-6)
    check("AdamW two groups vs textbook", ok)


def test_io():
    with tempfile.TemporaryDirectory() as d:
        t = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "bb": np.ones(5, np.float32)}
        ref.save_safetensors(os.path.join(d, "x.safetensors"), t)
        back = ref.load_safetensors(os.path.join(d, "x.safetensors"))
        check("safetensors round trip", set(back) == set(t) and all(np.array_equal(back[k], t[k]) for k in t))
        with open(os.path.join(d, "x.safetensors"), "rb") as f:
            n = int.from_bytes(f.read(8), "little")
        check("safetensors header aligned", n % 8 == 0)
        toks = np.array([1, 2, 65535, 0])
        ref.write_shard(os.path.join(d, "s.bin"), toks)
        check("shard size", os.path.getsize(os.path.join(d, "s.bin")) == 1024 + 8)
        check("shard round trip", np.array_equal(ref.read_shard(os.path.join(d, "s.bin")), toks))
        # Version 2 (docs/contracts.md §10): the same header with [1] = 2, uint32 tokens.
        big = np.array([1, 65536, 128255, 7])
        ref.write_shard(os.path.join(d, "v2.bin"), big)
        raw = open(os.path.join(d, "v2.bin"), "rb").read()
        check("v2 shard layout", len(raw) == 1024 + 16 and raw[4:8] == (2).to_bytes(4, "little")
              and raw[1028:1032] == (65536).to_bytes(4, "little"))
        check("v2 shard round trip", np.array_equal(ref.read_shard(os.path.join(d, "v2.bin")), big))
        ref.write_shard(os.path.join(d, "v2small.bin"), toks, ref.shard_version(100000))
        check("v2 shard of small ids", os.path.getsize(os.path.join(d, "v2small.bin")) == 1024 + 16
              and np.array_equal(ref.read_shard(os.path.join(d, "v2small.bin")), toks))


def test_microbatches():
    # Accumulating M microbatches with loss/M must equal one full batch (same update).
    with tempfile.TemporaryDirectory() as d:
        ref.write_shard(os.path.join(d, "t.bin"), np.random.default_rng(1).integers(0, 64, 5000))
        out = []
        for M in (1, 4):
            a = ref.train_parser(__import__("argparse").ArgumentParser()).parse_args(
                ["--layers", "1", "--dim", "32", "--heads", "2", "--seq", "16", "--vocab", "64",
                 "--batch", "8", "--microbatches", str(M), "--steps", "3", "--lr", "1e-3",
                 "--data", os.path.join(d, "t.bin")])
            model, recs = ref.train(a)
            out.append((recs, model.named_arrays()))
        dl = max(abs(r1["loss"] - r4["loss"]) for r1, r4 in zip(out[0][0], out[1][0]))
        dp = max(np.abs(out[0][1][k] - out[1][1][k]).max() for k in out[0][1])
        check("microbatch accumulation", dl < 1e-5 and dp < 1e-5, f"dloss {dl:.2e} dparam {dp:.2e}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    for t in (test_forward, test_loader, test_lr, test_adamw, test_io, test_microbatches):
        t()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("all reference self-checks passed")
