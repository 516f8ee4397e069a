#!/usr/bin/python3
"""Checks the Llama reference (llama_torch.py, llama_moe_torch.py) against independent
readings of docs/contracts.md §9/§9a, so a mistake in the reference cannot hide one in the engine:
RoPE against complex rotations, llama3 scaling against Hugging Face's vectorised formula,
GQA against MHA with repeated K/V weights, RMSNorm and SwiGLU against their formulas, the
whole model against a float64 numpy forward with per-head and per-token loops, the MoE
against a per-token loop, and every gradient against finite differences (gradcheck in
double). Needs no meshtrain binary. Exits non-zero when a check fails."""
import math
import os
import sys
import types

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.utils import stateless

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_torch as lt  # noqa: E402
import selftest_llama_numpy as npref  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        failures.append(name)


def shape(**kw):
    """A train namespace's model fields with llama_torch's defaults, overridden by kw."""
    a = lt.train_parser(__import__("argparse").ArgumentParser()).parse_args(["--data", "-"])
    for k, v in kw.items():
        setattr(a, k, v)
    return lt.shape_from_args(a)


def perturbed(s, seed, router_std=None):
    """A model of shape s with every weight random (norms away from 1), in double."""
    m = lt.Llama(s)
    lt.init_weights(m, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.add_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() == 1 else 0.05))
            if router_std and n.endswith("mlp.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=g) * router_std)
    return m.double()


def test_rope():
    hd, T, theta = 16, 40, 500000.0
    cos, sin = lt.rope_tables(hd, T, theta)
    f = theta ** (-2.0 * np.arange(hd // 2) / hd)
    ang = np.arange(T)[:, None] * f[None, :]
    check("rope tables are fp32 roundings of double cos/sin",
          cos.dtype == torch.float32 and np.abs(cos.numpy()[:, :hd // 2] - np.cos(ang)).max() < 6e-8
          and np.array_equal(cos.numpy()[:, :hd // 2], cos.numpy()[:, hd // 2:])
          and np.abs(sin.numpy()[:, hd // 2:] - np.sin(ang)).max() < 6e-8)
    x = np.random.default_rng(0).standard_normal((3, T, hd))
    got = lt.apply_rope(torch.from_numpy(x), cos, sin).numpy()
    want = npref.rope(x, f)
    check("rope = complex rotation of (x[i], x[i+hd/2])", np.abs(got - want).max() < 1e-6,
          f"max|diff| {np.abs(got - want).max():.1e}")
    # Scores of rotated q and k depend on the distance only (the point of RoPE).
    q, k = x[0, 0], x[1, 0]
    qs = lt.apply_rope(torch.from_numpy(np.tile(q, (T, 1))), cos, sin).numpy()
    ks = lt.apply_rope(torch.from_numpy(np.tile(k, (T, 1))), cos, sin).numpy()
    d = [qs[m] @ ks[m - 5] for m in range(5, T)]
    check("rope scores depend on m - n only", np.ptp(d) < 1e-5 * abs(d[0]) + 1e-6)


def hf_llama3(inv_freq, rs):
    """Hugging Face's _compute_llama3_parameters, written out (vectorised), in double."""
    inv = torch.tensor(inv_freq, dtype=torch.float64)
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > old / lo, inv / factor, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < old / hi) * ~(wavelen > old / lo)
    return torch.where(medium, smoothed, inv_l).tolist(), wavelen


def test_rope_scaling():
    for hd, theta, rs in ((128, 500000.0, dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                                original_max_position_embeddings=8192)),
                          (16, 10000.0, dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                             original_max_position_embeddings=32))):
        base = lt.rope_inv_freq(hd, theta)
        got = lt.rope_inv_freq(hd, theta, dict(rs, rope_type="llama3"))
        want, wavelen = hf_llama3(base, rs)
        old = rs["original_max_position_embeddings"]
        bands = (int((wavelen > old).sum()), int((wavelen < old / 4).sum()))
        check(f"llama3 scaling hd {hd} = HF's formula", np.abs(np.array(got) - want).max() <= 1e-15 * max(want)
              and min(bands) > 0 and sum(bands) < hd // 2, f"bands (scaled, kept) {bands}")
    check("inv_freq = theta^(-2i/hd)",
          np.allclose(lt.rope_inv_freq(64, 500000.0), 500000.0 ** (-np.arange(0, 64, 2) / 64), rtol=1e-15))


def test_pieces():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 24)) * 0.01  # eps matters at this scale
    norm = lt.RMSNorm(24, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(rng.standard_normal(24)))
    got = norm(torch.from_numpy(x).float()).detach().numpy()
    want = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5) * norm.weight.detach().numpy()
    check("rmsnorm = x / sqrt(mean(x^2) + eps) * w", np.abs(got - want).max() < 1e-5 * np.abs(want).max())
    mlp = lt.SwiGLU(24, 40).double()
    xt = torch.from_numpy(x)
    want = mlp.down_proj(F.silu(mlp.gate_proj(xt)) * mlp.up_proj(xt))
    check("swiglu = down(F.silu(gate) * up)", torch.allclose(mlp(xt), want, rtol=1e-13, atol=1e-15))
    check("default ffn dim = 256 ceil((8C/3)/256)",
          all(lt.default_ffn_dim(C) == 256 * math.ceil((8 * C / 3) / 256) for C in range(1, 5000)))


def test_gqa():
    for H, Hkv, hd, C in ((4, 2, 8, 32), (6, 1, 12, 32), (4, 4, 6, 20)):
        s = shape(dim=C, heads=H, kv_heads=Hkv, head_dim=hd, seq=7)
        gqa = lt.Attention(s).double()
        mha = lt.Attention(shape(dim=C, heads=H, kv_heads=H, head_dim=hd, seq=7)).double()
        with torch.no_grad():
            for n in ("q_proj", "o_proj"):
                getattr(mha, n).weight.copy_(getattr(gqa, n).weight)
            for n in ("k_proj", "v_proj"):  # kv head j // (H/Hkv) for query head j
                w = getattr(gqa, n).weight.view(Hkv, hd, C)
                getattr(mha, n).weight.copy_(w.repeat_interleave(H // Hkv, dim=0).reshape(H * hd, C))
        cos, sin = lt.rope_tables(hd, 7, 500000.0)
        x = torch.randn(2, 7, C, dtype=torch.float64)
        d = (gqa(x, cos, sin) - mha(x, cos, sin)).abs().max().item()
        check(f"GQA H {H} Hkv {Hkv} = MHA with repeated K/V", d < 1e-13, f"max|diff| {d:.1e}")


MODELS = {  # name: (shape kwargs, router init std)
    "gqa untied": (dict(layers=2, dim=8, heads=4, kv_heads=2, head_dim=2, ffn_dim=6, vocab=5,
                        seq=4), None),
    "mqa tied hd!=C/H scaled rope": (dict(layers=2, dim=12, heads=4, kv_heads=1, head_dim=6, ffn_dim=20,
                                           vocab=13, seq=6, tie_embeddings=True, rope_theta=100.0,
                                           rope_scaling_factor=4.0, rope_scaling_original_max_position=4,
                                           norm_eps=1e-3), None),
    "moe softmax k2 capacity shared": (dict(layers=3, dim=16, heads=2, kv_heads=1, ffn_dim=24, vocab=11,
                                            seq=6, experts=4, topk=2, capacity_factor=0.75,
                                            expert_ffn_dim=8, shared_experts=1, first_dense_layers=1,
                                            aux_loss_coef=0.1, routed_scale=1.5), 1.0),
    "moe sigmoid k3 bias every-2": (dict(layers=2, dim=16, heads=2, ffn_dim=24, vocab=11, seq=6,
                                         experts=5, topk=3, router="sigmoid", routed_scale=2.5,
                                         router_bias_update=0.01, moe_every=2, aux_loss_coef=0.1), 1.0),
    "moe softmax k1": (dict(layers=1, dim=16, heads=2, ffn_dim=24, vocab=11, seq=6, experts=3,
                            topk=1, capacity_factor=1.0), 1.0),
    "moe sigmoid k1": (dict(layers=1, dim=8, heads=2, ffn_dim=8, vocab=7, seq=4, experts=3, topk=1,
                            router="sigmoid", routed_scale=0.7), 1.0),
}
FULL_GRADCHECK = "gqa untied"  # the one model small enough for every element


def test_whole_model():
    rng = np.random.default_rng(2)
    for name, (kw, rstd) in MODELS.items():
        s = shape(**kw)
        m = perturbed(s, 3, rstd)
        for b in m.moe_layers():
            if b.gamma > 0:
                b.gate.e_score_correction_bias.copy_(torch.from_numpy(rng.standard_normal(b.E) * 0.2))
        idx, tgt = rng.integers(0, s.V, (2, s.T)), rng.integers(0, s.V, (2, s.T))
        ce, aux = m.loss_terms(torch.from_numpy(idx), torch.from_numpy(tgt))
        W = {n: t.detach().numpy() for n, t in m.named_tensors().items()}
        want_ce, want_aux = npref.loss(W, idx, tgt, s)
        got_aux = aux.item() if aux is not None else 0.0
        check(f"model [{name}] = numpy forward", abs(ce.item() - want_ce) < 1e-6 * want_ce
              and abs(got_aux - want_aux) < 1e-9 + 1e-6 * want_aux,
              f"ce {ce.item():.9f} {want_ce:.9f} aux {got_aux:.6g} {want_aux:.6g}")
        drops = sum(b.dropped for b in m.moe_layers())
        if s.moe is not None and s.moe.capacity_factor > 0:
            check(f"model [{name}] drops some assignments", drops > 0, str(drops))
        grad_check(name, m, idx, tgt, full=name == FULL_GRADCHECK)


def grad_check(name, m, idx, tgt, full):
    """Full gradcheck (every element) when `full`, else gradcheck's fast mode (a random
    projection) on each parameter tensor in turn, the others held: every tensor is checked
    on its own at a few forwards each."""
    wrapped = _LossTerms(m)
    named = {"m." + n: p.detach().clone() for n, p in m.named_parameters()}
    idx, tgt = torch.from_numpy(idx), torch.from_numpy(tgt)

    def total_of(keys):
        def total(*ps):
            ce, aux = stateless.functional_call(wrapped, dict(named, **dict(zip(keys, ps))), (idx, tgt))
            return ce if aux is None else ce + aux
        return total

    groups = [list(named)] if full else [[k] for k in named]
    bad = [g[0] for g in groups if not torch.autograd.gradcheck(
        total_of(g), tuple(named[k].requires_grad_(True) for k in g), eps=1e-6, atol=1e-7,
        rtol=1e-4, fast_mode=not full, raise_exception=False)]
    check(f"model [{name}] gradients = finite differences (gradcheck {'full' if full else 'fast, per tensor'})",
          not bad, f"{sum(p.numel() for p in named.values())} parameters, {len(named)} tensors {bad[:3]}")


class _LossTerms(torch.nn.Module):
    """(ce, aux) as the module's forward, so functional_call can swap the parameters."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, idx, tgt):
        return self.m.loss_terms(idx, tgt)


def test_moe_ties():
    """Equal selection scores go to the lower expert index (a stable descending sort)."""
    moe = lt.MoE(4, types.SimpleNamespace(
        experts=8, topk=3, capacity_factor=0, aux_loss_coef=0.01, expert_ffn_dim=4,
        shared_experts=0, router="softmax", routed_scale=1.0, router_bias_update=0))
    levels = torch.randint(0, 3, (200, 8), generator=torch.Generator().manual_seed(4)).float() / 4
    got = moe.select(levels).tolist()
    want = [sorted(range(8), key=lambda e: (-row[e], e))[:3] for row in levels.tolist()]
    check("top-k ties go to the lower expert index", got == want)


def test_moe_training_state():
    s = shape(layers=1, dim=16, heads=2, ffn_dim=24, vocab=11, seq=8, experts=4, topk=2,
              router_bias_update=0.5, capacity_factor=1.0)
    m = perturbed(s, 5, 1.0).float()
    moe = m.moe_layers()[0]
    idx = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(0))
    for _ in range(2):  # two microbatches of one step
        m.loss_terms(idx, idx)
    sel = moe.selected.clone()
    m.after_step()
    err = sel.double().mean() - sel.double()
    check("router bias += gamma sign(mean - load) from the pre-drop counts",
          torch.equal(moe.gate.e_score_correction_bias, torch.sign(err).float() * 0.5),
          f"selected {sel.tolist()}")
    rec = m.step_metrics()
    check("step metrics: load after drops, dropped share, aux mean over groups",
          sum(rec["expert_load"][0]) == 2 * 24 * 2 * (1 - rec["dropped_frac"])
          and rec["dropped_frac"] > 0 and moe.assignments == 0, str(rec))


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for t in (test_rope, test_rope_scaling, test_pieces, test_gqa, test_whole_model, test_moe_ties,
              test_moe_training_state):
        t()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("all llama reference self-checks passed")
