#!/usr/bin/python3
"""PyTorch reference for meshtrain's --arch llama (docs/contracts.md §9 and §9a), written from
the contract; data, optimizer, schedule, clipping and metrics are gpt_torch.py's (§2, §3, §6).

Run with Debian's /usr/bin/python3 (python3-torch 1.13 + numpy).

  model     x = embed_tokens[idx] (no positions). Block i:
              h = x + attn(rmsnorm(x; input_layernorm))
              x = h + mlp(rmsnorm(h; post_attention_layernorm))
            then rmsnorm(x; model.norm), logits = x @ lm_head^T (embed_tokens^T when
            --tie-embeddings), loss = mean cross-entropy. No biases.
  dropout   --dropout P in training only (docs/contracts.md section 1; dropout_masks.py): on
            embed_tokens' output, on the attention probabilities after the softmax (before
            @ v; query head j draws its own mask), and on o_proj's and the MLP's outputs
            before their residual adds: x * mask / (1 - P), the masks of the step and of the
            microbatch's sequences in the global batch (gpt_torch.train_step sets them).
  rmsnorm   weight * (x * rsqrt(mean(x^2) + eps)) (Hugging Face LlamaRMSNorm's order),
            statistics in fp32 at least; eps --norm-eps (default 1e-5).
  attention hd = --head-dim (default C/H); q = h Wq^T [H*hd], k, v = h Wk^T, h Wv^T
            [Hkv*hd], Hkv = --kv-heads (default H); query head j reads kv head j // (H/Hkv)
            (a broadcast over the group, not a copy per head); RoPE on q and k; causal
            softmax(q k^T / sqrt(hd)); heads concatenated in order; @ Wo^T.
  rope      rotate-half: x' = x cos + rotate_half(x) sin, rotate_half([a, b]) = [-b, a];
            inv_freq[i] = theta^(-2i/hd), angle = pos * inv_freq, both in double, then
            cos/sin rounded to fp32 (§9a); theta --rope-theta (default 500000); Llama 3.1's
            rope_scaling "llama3" (factor, low/high_freq_factor, original max positions),
            Hugging Face's _compute_llama3_parameters, in double.
  mlp       SwiGLU down(silu(gate(h)) * up(h)) of width --ffn-dim (default
            256 * ceil((8C/3) / 256)); or the MoE of llama_moe_torch.py on layer i when
            --experts > 0, i >= --first-dense-layers and (i + 1) % --moe-every == 0.
  init      matrices N(0, 0.02), every o_proj and down_proj (experts' and shared experts'
            too) N(0, 0.02/sqrt(2L)), RMSNorm weights 1 (torch RNG; the engine has its own
            counter-based init, so equivalence tests go through an init file).
  names     docs/contracts.md §9: model.embed_tokens.weight, model.layers.{i}.{input_layernorm,
            post_attention_layernorm}.weight, .self_attn.{q,k,v,o}_proj.weight,
            .mlp.{gate,up,down}_proj.weight (MoE: .mlp.gate.weight,
            .mlp.gate.e_score_correction_bias, .mlp.experts.{e}.*, .mlp.shared_experts.*),
            model.norm.weight, lm_head.weight (absent when tied).

Subcommands:
  train   mirrors `meshtrain train --arch llama` flags; --init-from takes a safetensors
          file of the names above or a Hugging Face directory (hf_dir.py; its config.json
          sets the shape); writes --metrics JSONL and --export safetensors
  init    model flags + --out FILE.safetensors
"""
import argparse
import math
import os
import sys
import types

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dropout_masks  # noqa: E402
import gpt_torch as gpt  # noqa: E402
import hf_dir  # noqa: E402
from llama_moe_torch import MoE, SwiGLU  # noqa: E402

# ---------------------------------------------------------------- shape


def default_ffn_dim(C):
    return 256 * ((8 * C + 767) // 768)  # 256 * ceil((8C/3) / 256), in integers


def shape_from_args(a):
    """The model of a train/init namespace, every default resolved and checked."""
    H = a.heads
    hd = a.head_dim or (a.dim // H)
    if not a.head_dim and a.dim % H:
        raise ValueError(f"heads {H} must divide dim {a.dim} (or give --head-dim)")
    Hkv = a.kv_heads or H
    if H % Hkv:
        raise ValueError(f"--kv-heads {Hkv} must divide --heads {H}")
    if hd % 2:
        raise ValueError(f"RoPE needs an even head dim, got {hd}")
    scaling = None
    if a.rope_scaling_factor > 0:
        scaling = {"rope_type": "llama3", "factor": a.rope_scaling_factor,
                   "low_freq_factor": a.rope_scaling_low_freq_factor,
                   "high_freq_factor": a.rope_scaling_high_freq_factor,
                   "original_max_position_embeddings": a.rope_scaling_original_max_position}
    F_ = a.ffn_dim or default_ffn_dim(a.dim)
    moe = None
    if a.experts > 0:
        moe = types.SimpleNamespace(
            experts=a.experts, topk=a.topk, capacity_factor=a.capacity_factor,
            aux_loss_coef=a.aux_loss_coef, expert_ffn_dim=a.expert_ffn_dim or F_,
            shared_experts=a.shared_experts, router=a.router, routed_scale=a.routed_scale,
            router_bias_update=a.router_bias_update, moe_every=a.moe_every,
            first_dense_layers=a.first_dense_layers)
    return types.SimpleNamespace(L=a.layers, C=a.dim, H=H, Hkv=Hkv, hd=hd, F=F_, V=a.vocab,
                                 T=a.seq, eps=a.norm_eps, theta=a.rope_theta, scaling=scaling,
                                 tie=a.tie_embeddings, moe=moe,
                                 dropout=getattr(a, "dropout", 0.0), seed=a.seed)


def is_moe_layer(s, i):
    m = s.moe
    return m is not None and i >= m.first_dense_layers and (i + 1) % m.moe_every == 0


# ---------------------------------------------------------------- RoPE


def rope_inv_freq(hd, theta, scaling=None):
    """inv_freq[i] (i < hd/2) in double, after Llama 3.1's scaling when given."""
    f = [math.pow(theta, -2.0 * i / hd) for i in range(hd // 2)]
    if not scaling:
        return f
    factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old = scaling["original_max_position_embeddings"]
    out = []
    for inv in f:
        wavelen = 2 * math.pi / inv
        if wavelen > old / lo:  # long wavelengths: slowed down by factor
            inv = inv / factor
        elif wavelen >= old / hi:  # the band between: interpolated
            smooth = (old / wavelen - lo) / (hi - lo)
            inv = (1 - smooth) * inv / factor + smooth * inv
        out.append(inv)
    return out


def rope_tables(hd, T, theta, scaling=None):
    """cos, sin as float32 (T, hd): angles in double, each half repeated."""
    f = rope_inv_freq(hd, theta, scaling)
    ang = [[p * fi for fi in f] for p in range(T)]
    cos = torch.tensor([[math.cos(a) for a in row] for row in ang], dtype=torch.float32)
    sin = torch.tensor([[math.sin(a) for a in row] for row in ang], dtype=torch.float32)
    return torch.cat([cos, cos], dim=1), torch.cat([sin, sin], dim=1)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def apply_rope(x, cos, sin):
    """x (..., T, hd), cos/sin (T, hd)."""
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------- model


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Attention(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.H, self.Hkv, self.hd = s.H, s.Hkv, s.hd
        self.q_proj = nn.Linear(s.C, s.H * s.hd, bias=False)
        self.k_proj = nn.Linear(s.C, s.Hkv * s.hd, bias=False)
        self.v_proj = nn.Linear(s.C, s.Hkv * s.hd, bias=False)
        self.o_proj = nn.Linear(s.H * s.hd, s.C, bias=False)

    def forward(self, x, cos, sin, drop=None):  # x is (B,T,C); drop: (B,H,T,T) or None
        B, T, _ = x.shape
        Hkv, G, hd = self.Hkv, self.H // self.Hkv, self.hd
        # Query head j = kv * G + g sits at [:, kv, g]; its kv head at [:, kv, 0].
        q = self.q_proj(x).view(B, T, Hkv, G, hd).permute(0, 2, 3, 1, 4)  # (B,Hkv,G,T,hd)
        k = self.k_proj(x).view(B, T, Hkv, 1, hd).permute(0, 2, 3, 1, 4)  # (B,Hkv,1,T,hd)
        v = self.v_proj(x).view(B, T, Hkv, 1, hd).permute(0, 2, 3, 1, 4)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (B,Hkv,G,T,T)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        if drop is not None:  # head j = kv * G + g
            att = att * drop.view(B, Hkv, G, T, T)
        y = (att @ v).permute(0, 3, 1, 2, 4).reshape(B, T, self.H * hd)  # heads in order
        return self.o_proj(y)


class Block(nn.Module):
    def __init__(self, s, moe):
        super().__init__()
        self.input_layernorm = RMSNorm(s.C, s.eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.C, s.eps)
        self.mlp = MoE(s.C, s.moe) if moe else SwiGLU(s.C, s.F)

    def forward(self, x, cos, sin, drop=None):
        """drop: None, or the layer's (probabilities, attention branch, MLP branch) factors."""
        a = self.self_attn(self.input_layernorm(x), cos, sin, drop[0] if drop else None)
        h = x + (a * drop[1] if drop else a)
        out = self.mlp(self.post_attention_layernorm(h))
        y, aux = out if isinstance(out, tuple) else (out, None)
        return h + (y * drop[2] if drop else y), aux


class Llama(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(s.V, s.C)
        self.model.layers = nn.ModuleList([Block(s, is_moe_layer(s, i)) for i in range(s.L)])
        self.model.norm = RMSNorm(s.C, s.eps)
        if not s.tie:
            self.lm_head = nn.Linear(s.C, s.V, bias=False)
        self.cos, self.sin = rope_tables(s.hd, s.T, s.theta, s.scaling)
        self.dropout_position = None  # (step, first sequence) while a training step runs

    def drop_factors(self, B, T, layer):
        """The factors of site 0 (layer None: the embedding) or of block `layer`'s three
        sites, for the running microbatch; None outside training or without --dropout."""
        if not self.s.dropout or self.dropout_position is None:
            return None
        step, first = self.dropout_position
        d = dropout_masks
        args = (self.s.seed, step)
        if layer is None:
            return d.rows_factor(*args, 0, self.s.dropout, first, B, T, self.s.C)
        site = 1 + 3 * layer
        return (d.probs_factor(*args, site, self.s.dropout, first, B, self.s.H, T),
                d.rows_factor(*args, site + 1, self.s.dropout, first, B, T, self.s.C),
                d.rows_factor(*args, site + 2, self.s.dropout, first, B, T, self.s.C))

    def moe_layers(self):
        return [b.mlp for b in self.model.layers if isinstance(b.mlp, MoE)]

    def loss_terms(self, idx, targets):
        """(mean cross-entropy, sum over MoE layers of their aux loss or None)."""
        B, T = idx.shape
        x = self.model.embed_tokens(idx)
        embed_drop = self.drop_factors(B, T, None)
        if embed_drop is not None:
            x = x * embed_drop
        aux_sum = None
        for i, block in enumerate(self.model.layers):
            x, aux = block(x, self.cos[:T], self.sin[:T], self.drop_factors(B, T, i))
            if aux is not None:
                aux_sum = aux if aux_sum is None else aux_sum + aux
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.s.tie else self.lm_head.weight
        logits = x @ head.t()  # (B,T,V)
        return F.cross_entropy(logits.view(-1, self.s.V), targets.reshape(-1)), aux_sum

    def forward(self, idx, targets):
        return self.loss_terms(idx, targets)[0]

    def after_step(self):
        for m in self.moe_layers():
            m.update_bias()

    def step_metrics(self):
        """The step's routing metrics as the engine reports them (docs/contracts.md §6), plus
        route_margin (reference only): the smallest top-k selection gap of the step."""
        layers = self.moe_layers()
        if not layers:
            return {}
        assigned = sum(m.assignments for m in layers)
        rec = {"aux_loss": sum(sum(m.aux_values) / max(len(m.aux_values), 1) for m in layers),
               "dropped_frac": sum(m.dropped for m in layers) / assigned if assigned else 0.0,
               "expert_load": [m.load.tolist() for m in layers],
               "route_margin": min(m.margin for m in layers)}
        for m in layers:
            m.reset_stats()
        return rec

    def named_tensors(self):
        """Parameters and the router biases, as torch tensors under their contract names."""
        out = dict(self.named_parameters())
        out.update((n, b) for n, b in self.named_buffers() if n.endswith("e_score_correction_bias"))
        return out

    def named_arrays(self):
        return {n: t.detach().float().numpy().copy() for n, t in self.named_tensors().items()}

    def load_named(self, tensors):
        """Copy a docs/contracts.md §9 dict into the model; names and shapes must match exactly
        (a router bias may be absent: it starts at zero)."""
        own = self.named_tensors()
        missing = sorted(n for n in set(own) - set(tensors) if not n.endswith("correction_bias"))
        extra = sorted(set(tensors) - set(own))
        if missing or extra:
            raise ValueError(f"tensor names differ: missing {missing[:5]}, unexpected {extra[:5]}")
        with torch.no_grad():
            for name, p in own.items():
                if name not in tensors:
                    continue
                t = torch.from_numpy(np.asarray(tensors[name], dtype=np.float32))
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: shape {tuple(t.shape)}, want {tuple(p.shape)}")
                p.copy_(t)


def init_weights(model, seed):
    """Deterministic in seed (torch's CPU generator, in parameter order)."""
    g = torch.Generator().manual_seed(seed)
    proj_std = 0.02 / math.sqrt(2 * model.s.L)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)  # RMSNorm weights: the only 1-D parameters
            else:
                std = proj_std if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)


def build_model(args):
    """The Llama of args: from --init-from (a file of §9 names, or a Hugging Face directory
    whose config.json then sets the shape on args), else init_weights(--seed)."""
    tensors = None
    if args.init_from and os.path.isdir(args.init_from):
        config, tensors = hf_dir.read_dir(args.init_from)
        for k, v in hf_dir.flags_of_config(config).items():
            setattr(args, k, v)
    elif args.init_from:
        tensors = gpt.load_safetensors(args.init_from)
    model = Llama(shape_from_args(args))
    if tensors is not None:
        model.load_named(tensors)
    else:
        init_weights(model, args.seed)
    return model


def train(args, log=None):
    return gpt.train(args, log, build=build_model)


# ---------------------------------------------------------------- command line


def parse_bool(v):
    if str(v).lower() in ("1", "true", "yes", "on"):
        return True
    if str(v).lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {v}")


def add_llama_flags(p):
    p.add_argument("--arch", choices=["llama"], default="llama",
                   help="gpt2 is gpt_torch.py's model")
    p.add_argument("--kv-heads", type=int, default=0, help="default --heads")
    p.add_argument("--head-dim", type=int, default=0, help="default dim / heads")
    p.add_argument("--ffn-dim", type=int, default=0, help="default 256 * ceil((8C/3) / 256)")
    p.add_argument("--rope-theta", type=float, default=500000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--tie-embeddings", type=parse_bool, nargs="?", const=True, default=False)
    # Llama 3.1 rope_scaling (factor 0 = off); the engine takes it from a config.json.
    p.add_argument("--rope-scaling-factor", type=float, default=0.0)
    p.add_argument("--rope-scaling-low-freq-factor", type=float, default=1.0)
    p.add_argument("--rope-scaling-high-freq-factor", type=float, default=4.0)
    p.add_argument("--rope-scaling-original-max-position", type=int, default=8192)
    p.add_argument("--experts", type=int, default=0)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--capacity-factor", type=float, default=0.0)
    p.add_argument("--aux-loss-coef", type=float, default=0.01)
    p.add_argument("--moe-every", type=int, default=1)
    p.add_argument("--router-bias-update", type=float, default=0.0)
    p.add_argument("--first-dense-layers", type=int, default=0)
    p.add_argument("--expert-ffn-dim", type=int, default=0, help="default --ffn-dim")
    p.add_argument("--shared-experts", type=int, default=0)
    p.add_argument("--router", choices=["softmax", "sigmoid"], default="softmax")
    p.add_argument("--routed-scale", type=float, default=1.0)
    p.add_argument("--dropout", type=float, default=0.0)
    return p


def train_parser(p):
    gpt.train_parser(p)
    p.add_argument("--ep", type=int, default=1)  # layouts: accepted, one worker is the reference
    return add_llama_flags(p)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    train_parser(sub.add_parser("train"))
    pi = sub.add_parser("init")
    gpt.add_model_flags(pi)
    add_llama_flags(pi)
    pi.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "init":
        model = Llama(shape_from_args(args))
        init_weights(model, args.seed)
        gpt.save_safetensors(args.out, model.named_arrays())
        return 0
    gpt.run_train(args, train)
    return 0


if __name__ == "__main__":
    sys.exit(main())
