"""A float64 numpy reading of docs/contracts.md §9 for selftest_llama.py, written from the text and
not from llama_torch.py: RoPE as complex rotations, attention with a loop over query heads
(each reading kv head j // (H/Hkv)), the MoE with a loop over tokens. Slow and plain.
"""
import math

import numpy as np


def inv_freq(s):
    f = s.theta ** (-2.0 * np.arange(s.hd // 2) / s.hd)
    if not s.scaling:
        return f
    r = s.scaling
    old, lo, hi, factor = (r["original_max_position_embeddings"], r["low_freq_factor"],
                           r["high_freq_factor"], r["factor"])
    wl = 2 * np.pi / f
    t = np.clip((old / wl - lo) / (hi - lo), 0.0, 1.0)  # 0 on long waves, 1 on short ones
    return np.where(wl < old / hi, f, np.where(wl > old / lo, f / factor, (1 - t) * f / factor + t * f))


def rope(x, f):
    """x (..., T, hd): the pair (x[i], x[i + hd/2]) as one complex number, turned by pos * f_i."""
    T, half = x.shape[-2], x.shape[-1] // 2
    z = (x[..., :half] + 1j * x[..., half:]) * np.exp(1j * np.arange(T)[:, None] * f[None, :])
    return np.concatenate([z.real, z.imag], axis=-1)


def rmsnorm(x, w, eps):
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w


def swiglu(x, W, pre):
    g = x @ W[pre + "gate_proj.weight"].T
    return (g / (1 + np.exp(-g)) * (x @ W[pre + "up_proj.weight"].T)) @ W[pre + "down_proj.weight"].T


def attention(x, W, pre, s, f):
    B, T, _ = x.shape
    hd, G = s.hd, s.H // s.Hkv
    q, k, v = (x @ W[pre + n + "_proj.weight"].T for n in "qkv")
    out = np.zeros((B, T, s.H * hd))
    causal = np.tril(np.ones((T, T), bool))
    for j in range(s.H):
        qs, kvs = slice(j * hd, (j + 1) * hd), slice((j // G) * hd, (j // G + 1) * hd)
        sc = rope(q[..., qs], f) @ np.swapaxes(rope(k[..., kvs], f), 1, 2) / math.sqrt(hd)
        sc = np.where(causal, sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        out[..., qs] = (p / p.sum(-1, keepdims=True)) @ v[..., kvs]
    return out @ W[pre + "o_proj.weight"].T


def moe(h, W, pre, m):
    """h (B, T, C), one group -> (y, aux)."""
    B, T, C = h.shape
    x = h.reshape(B * T, C)
    N, E, k = len(x), m.experts, m.topk
    logits = x @ W[pre + "gate.weight"].T
    if m.router == "softmax":
        sc = np.exp(logits - logits.max(1, keepdims=True))
        sc /= sc.sum(1, keepdims=True)
    else:
        sc = 1 / (1 + np.exp(-logits))
    bias = W.get(pre + "gate.e_score_correction_bias", np.zeros(E))
    cap = math.ceil(N * k * m.capacity_factor / E) if m.capacity_factor > 0 else N * k
    held, counts, y = [0] * E, np.zeros(E), np.zeros_like(x)
    for n in range(N):
        chosen = sorted(range(E), key=lambda e: (-(sc[n, e] + bias[e]), e))[:k]
        g = sc[n, chosen]
        if m.router == "sigmoid" or k > 1:
            g = g / g.sum()
        for e, gate in zip(chosen, g * m.routed_scale):
            counts[e] += 1
            if held[e] < cap:
                held[e] += 1
                y[n] += gate * swiglu(x[n], W, pre + f"experts.{e}.")
        if m.shared_experts:
            y[n] += swiglu(x[n], W, pre + "shared_experts.")
    P = sc if m.router == "softmax" else sc / sc.sum(1, keepdims=True)
    aux = m.aux_loss_coef * E * float((counts / (N * k) * P.mean(0)).sum())
    return y.reshape(B, T, C), aux


def loss(W, idx, tgt, s):
    """(mean cross-entropy, summed aux loss) of the model W (§9 names) on (B, T) tokens."""
    f = inv_freq(s)
    x = W["model.embed_tokens.weight"][idx]
    aux = 0.0
    for i in range(s.L):
        pre = f"model.layers.{i}."
        h = x + attention(rmsnorm(x, W[pre + "input_layernorm.weight"], s.eps), W,
                          pre + "self_attn.", s, f)
        u = rmsnorm(h, W[pre + "post_attention_layernorm.weight"], s.eps)
        m = s.moe
        if m is not None and i >= m.first_dense_layers and (i + 1) % m.moe_every == 0:
            y, a = moe(u, W, pre + "mlp.", m)
            aux += a
        else:
            y = swiglu(u, W, pre + "mlp.")
        x = h + y
    x = rmsnorm(x, W["model.norm.weight"], s.eps)
    logits = x @ W["model.embed_tokens.weight" if s.tie else "lm_head.weight"].T
    mx = logits.max(-1, keepdims=True)
    lse = np.log(np.exp(logits - mx).sum(-1)) + mx[..., 0]
    picked = np.take_along_axis(logits, tgt[..., None], -1)[..., 0]
    return float((lse - picked).mean()), aux
