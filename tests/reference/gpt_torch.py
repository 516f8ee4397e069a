#!/usr/bin/python3
"""PyTorch reference for meshtrain's single-worker training (docs/contracts.md §1-§4, §6).

Run with Debian's /usr/bin/python3 (python3-torch 1.13 + numpy). Everything is float32
and deterministic. The pieces, each pinned to the contract so the C++ engine can be
checked against it:

  model     nanoGPT/GPT-2: x = wte[idx] + wpe[pos]; pre-LN blocks (LayerNorm eps 1e-5,
            biased variance); causal attention with qkv = [q | k | v], head j on columns
            j*hd..(j+1)*hd-1 of each; tanh-GELU MLP of width 4C; ln_f; logits = x @ wte^T
            (tied); loss = mean cross-entropy over all B*T targets. No dropout.
  data      llm.c token shard: 256 int32 header [20240520, version, ntok], then ntok
            tokens, uint16 for version 1 (file size 1024 + 2*ntok) or uint32 for version 2
            (1024 + 4*ntok, vocabularies above 65,536; docs/contracts.md §10).
            Global batch k takes B sequences of T+1 tokens from the current position,
            which returns to token 0 first when pos + B*T + 1 > ntok; it then advances
            by B*T. Microbatch j is the j-th consecutive slice of B/M sequences.
  step      loss = sum over microbatches of mean-CE(microbatch) / M (= global mean CE);
            grad_norm = global L2 norm of all gradients before clipping; when
            grad_clip > 0 the gradients are scaled as torch.nn.utils.clip_grad_norm_
            does: by min(1, grad_clip / (grad_norm + 1e-6)).
  optimizer torch.optim.AdamW (bias correction on) with two groups: weight decay on
            tensors with >= 2 dims (wte, wpe, all weight matrices), none on biases and
            LayerNorm parameters.
  lr        update u (0-based; metrics step = u + 1), warmup N, total steps S:
              u < N:                  lr_u = lr * (u + 1) / N
              constant, u >= N:       lr_u = lr
              cosine,   u >= N:       lr_u = min_lr + 0.5 * (lr - min_lr)
                                             * (1 + cos(pi * (u - N) / (S - 1 - N)))
                                      (lr_u = lr when S - 1 - N <= 0)
            so the cosine starts at lr on the first post-warmup update and reaches
            min_lr exactly on the last update (u = S - 1).
  init      nanoGPT: weights N(0, 0.02), both c_proj weights N(0, 0.02/sqrt(2L)),
            biases 0, LayerNorm weight 1 / bias 0 (torch RNG; the C++ engine has its own
            counter-based init, so equivalence tests go through an init file).

Subcommands:
  train   mirrors `meshtrain train` flags; writes --metrics JSONL and --export safetensors
  init    --layers --dim --heads --seq --vocab --seed [--positions P] --out FILE.safetensors
  data    --out FILE.bin --tokens N --vocab V [--seed S | --text FILE]
          (version 2 when --vocab > 65536, else version 1)
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import safetensors_io

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_VERSION_WIDE = 2  # 32-bit tokens, for vocabularies above 65,536
SHARD_DTYPES = {SHARD_VERSION: "<u2", SHARD_VERSION_WIDE: "<u4"}  # version -> token type
HEADER_INTS = 256

# ---------------------------------------------------------------- safetensors (fp32)


def save_safetensors(path, tensors):
    """tensors: dict name -> numpy/torch array; written as F32 in insertion order."""
    safetensors_io.save(path, tensors, "F32")


def load_safetensors(path):
    """Returns dict name -> float32 numpy array (F32 only, which is all the contract uses)."""
    return safetensors_io.load(path, ("F32",))


# ---------------------------------------------------------------- token shards (docs/contracts.md §3)


def shard_version(vocab):
    """Version 1 (uint16) whenever every id of the vocabulary fits, else version 2."""
    return SHARD_VERSION if vocab <= 65536 else SHARD_VERSION_WIDE


def write_shard(path, tokens, version=None):
    """version None: the narrowest that holds every id."""
    tokens = np.asarray(tokens)
    top = int(tokens.max()) if len(tokens) else -1
    if version is None:
        version = shard_version(top + 1)
    assert len(tokens) == 0 or tokens.min() >= 0
    assert top < (65536 if version == SHARD_VERSION else 2 ** 32)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = SHARD_MAGIC, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(SHARD_DTYPES[version]).tobytes())


def read_shard(path):
    with open(path, "rb") as f:
        raw = f.read()
    header = np.frombuffer(raw[:HEADER_INTS * 4], dtype="<i4")
    if header[0] != SHARD_MAGIC or int(header[1]) not in SHARD_DTYPES:
        raise ValueError(f"{path}: bad shard magic/version {header[0]}/{header[1]}")
    dtype = np.dtype(SHARD_DTYPES[int(header[1])])
    ntok = int(header[2])
    if ntok < 0 or len(raw) != HEADER_INTS * 4 + dtype.itemsize * ntok:
        raise ValueError(f"{path}: size {len(raw)} != 1024 + {dtype.itemsize}*{ntok}")
    return np.frombuffer(raw[HEADER_INTS * 4:], dtype=dtype).astype(np.int64)


class Loader:
    """llm.c's sequential loader: batches of B sequences of T+1 tokens, wraparound to 0."""

    def __init__(self, tokens, B, T):
        if len(tokens) < B * T + 1:
            raise ValueError(f"shard has {len(tokens)} tokens, need at least B*T+1 = {B*T+1}")
        self.tokens, self.B, self.T, self.pos = tokens, B, T, 0

    def next_batch(self):
        B, T = self.B, self.T
        if self.pos + B * T + 1 > len(self.tokens):
            self.pos = 0
        buf = self.tokens[self.pos:self.pos + B * T + 1]
        x = torch.from_numpy(buf[:-1].reshape(B, T).copy())
        y = torch.from_numpy(buf[1:].reshape(B, T).copy())
        self.pos += B * T
        return x, y


# ---------------------------------------------------------------- model (docs/contracts.md §1, §4)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


class Attention(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):  # x is (B,T,C)
        B, T, C = x.shape
        hd = C // self.H
        q, k, v = self.c_attn(x).split(C, dim=2)  # each (B,T,C); head j = cols j*hd..
        q = q.view(B, T, self.H, hd).transpose(1, 2)  # (B,H,T,hd)
        k = k.view(B, T, self.H, hd).transpose(1, 2)
        v = v.view(B, T, self.H, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (B,H,T,T)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)  # heads concatenated
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, H)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, C, H, T, V, positions=None):
        super().__init__()
        if C % H:
            raise ValueError(f"heads {H} must divide dim {C}")
        self.L, self.C, self.H, self.T, self.V = L, C, H, T, V
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C),
            wpe=nn.Embedding(positions or T, C),
            h=nn.ModuleList([Block(C, H) for _ in range(L)]),
            ln_f=nn.LayerNorm(C, eps=1e-5),
        ))

    def forward(self, idx, targets):  # idx, targets are (B,T) int64
        tr = self.transformer
        T = idx.shape[1]
        x = tr.wte(idx) + tr.wpe(torch.arange(T))
        for block in tr.h:
            x = block(x)
        logits = tr.ln_f(x) @ tr.wte.weight.t()  # (B,T,V), tied LM head
        return F.cross_entropy(logits.view(-1, self.V), targets.reshape(-1))

    def load_named(self, tensors):
        """Copy a docs/contracts.md §4 dict into the model; names and shapes must match exactly."""
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(tensors))
        extra = sorted(set(tensors) - set(own))
        if missing or extra:
            raise ValueError(f"tensor names differ: missing {missing[:5]}, unexpected {extra[:5]}")
        with torch.no_grad():
            for name, p in own.items():
                t = torch.from_numpy(np.asarray(tensors[name], dtype=np.float32))
                if tuple(t.shape) != tuple(p.shape):
                    raise ValueError(f"{name}: shape {tuple(t.shape)}, want {tuple(p.shape)}")
                p.copy_(t)

    def named_arrays(self):
        return {n: p.detach().numpy().copy() for n, p in self.named_parameters()}


def init_weights(model, seed):
    """nanoGPT init; deterministic in seed (torch's CPU generator, in parameter order)."""
    g = torch.Generator().manual_seed(seed)
    proj_std = 0.02 / math.sqrt(2 * model.L)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                std = proj_std if name.endswith("c_proj.weight") else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)


# ---------------------------------------------------------------- schedule + training


def lr_at(u, args):
    """LR of update u (0-based); see the module docstring for the formula."""
    N, S = args.warmup, args.steps
    if u < N:
        return args.lr * (u + 1) / N
    if args.lr_schedule == "constant":
        return args.lr
    decay = S - 1 - N
    if decay <= 0:
        return args.lr
    ratio = (u - N) / decay
    return args.min_lr + 0.5 * (args.lr - args.min_lr) * (1.0 + math.cos(math.pi * ratio))


def make_optimizer(model, args):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2),
                             eps=args.eps, foreach=False)


def train_step(model, opt, loader, u, args):
    """One optimizer update; returns (loss, lr, grad_norm) as Python floats."""
    B, M = args.batch, args.microbatches
    x, y = loader.next_batch()
    mb = B // M
    opt.zero_grad(set_to_none=False)
    loss_sum = 0.0
    # --precision bf16: PyTorch's own mixed precision, CPU autocast to bf16 (the reference
    # of meshtrain's bf16). Only the forward runs under autocast, as its docs prescribe;
    # the parameters, their gradients and AdamW stay fp32.
    bf16 = getattr(args, "precision", "fp32") == "bf16"
    for j in range(M):
        xj, yj = x[j * mb:(j + 1) * mb], y[j * mb:(j + 1) * mb]
        # --dropout (llama_torch.py): the masks of step u + 1 for sequences j * mb.. of the batch.
        if hasattr(model, "dropout_position"):
            model.dropout_position = (u + 1, j * mb)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            # A model with a loss term beside the cross-entropy (llama_torch's MoE aux loss)
            # returns it from loss_terms: differentiated, but not part of the metric.
            ce, extra = model.loss_terms(xj, yj) if hasattr(model, "loss_terms") else (model(xj, yj), None)
            loss = ce / M
            total = loss if extra is None else loss + extra / M
        total.float().backward()
        loss_sum += loss.item()
    if hasattr(model, "dropout_position"):
        model.dropout_position = None  # evaluation never drops
    grads = [p.grad for p in model.parameters()]
    norm = torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)
    if args.grad_clip > 0:
        # Same arithmetic as torch.nn.utils.clip_grad_norm_ (1.13): always scale by
        # the clamped coefficient.
        coef = torch.clamp(args.grad_clip / (norm + 1e-6), max=1.0)
        for g in grads:
            g.detach().mul_(coef)
    lr = lr_at(u, args)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    if hasattr(model, "after_step"):  # state that follows the update (MoE router bias)
        model.after_step()
    return loss_sum, lr, norm.item()


@torch.no_grad()
def eval_loss(model, tokens, args):
    loader = Loader(tokens, args.batch // args.microbatches, args.seq)
    losses = [model(*loader.next_batch()).item() for _ in range(args.eval_batches)]
    return sum(losses) / len(losses)


def build_model(args):
    """The GPT of args: from --init-from's file, else nanoGPT's init from --seed."""
    model = GPT(args.layers, args.dim, args.heads, args.seq, args.vocab)
    if args.init_from:
        tensors = load_safetensors(args.init_from)
        # A position table longer than --seq is kept whole (as nanoGPT's block_size):
        # only its first T rows are used, but all of it is trained (weight decay) and
        # exported.
        wpe = tensors.get("transformer.wpe.weight")
        if wpe is not None and wpe.shape[0] > args.seq:
            model = GPT(args.layers, args.dim, args.heads, args.seq, args.vocab,
                        positions=wpe.shape[0])
        model.load_named(tensors)
    else:
        init_weights(model, args.seed)
    return model


def train(args, log=None, build=build_model):
    """Runs args.steps updates of the model build(args) returns (llama_torch passes its
    own); returns (model, list of metric dicts)."""
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    if args.batch % args.microbatches:
        raise ValueError(f"microbatches {args.microbatches} must divide batch {args.batch}")
    model = build(args)
    tokens = read_shard(args.data)
    if tokens.max() >= args.vocab:
        raise ValueError(f"token {tokens.max()} >= vocab {args.vocab}")
    val_tokens = read_shard(args.val_data) if args.val_data else None
    loader = Loader(tokens, args.batch, args.seq)
    opt = make_optimizer(model, args)
    records = []
    for u in range(args.steps):
        t0 = time.perf_counter()
        loss, lr, norm = train_step(model, opt, loader, u, args)
        dt = time.perf_counter() - t0
        rec = {"step": u + 1, "loss": loss, "lr": lr, "grad_norm": norm, "step_time_s": dt,
               "tokens_per_s": args.batch * args.seq / dt}
        if hasattr(model, "step_metrics"):  # MoE routing: aux_loss, dropped_frac, expert_load
            rec.update(model.step_metrics())
        if val_tokens is not None and args.eval_every > 0 and (u + 1) % args.eval_every == 0:
            rec["val_loss"] = eval_loss(model, val_tokens, args)
        records.append(rec)
        if log:
            log(rec)
    return model, records


def add_model_flags(p):
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seed", type=int, default=1337)


def train_parser(p):
    add_model_flags(p)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--lr-schedule", choices=["constant", "cosine"], default="cosine")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--data", required=True)
    p.add_argument("--val-data")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--init-from")
    p.add_argument("--export")
    p.add_argument("--metrics")
    # Layout flags are accepted for command-line parity; one worker is the reference.
    for flag in ("--dp", "--tp", "--pp"):
        p.add_argument(flag, type=int, default=1)
    p.add_argument("--backend", default="local")
    return p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    train_parser(sub.add_parser("train"))
    pi = sub.add_parser("init")
    add_model_flags(pi)
    pi.add_argument("--positions", type=int, help="position-table rows (default: --seq)")
    pi.add_argument("--out", required=True)
    pd = sub.add_parser("data")
    pd.add_argument("--out", required=True)
    pd.add_argument("--tokens", type=int, default=100000)
    pd.add_argument("--vocab", type=int, default=256)
    pd.add_argument("--seed", type=int, default=0)
    pd.add_argument("--text", help="byte-level tokens of this file instead of random ones")
    args = ap.parse_args(argv)

    if args.cmd == "init":
        model = GPT(args.layers, args.dim, args.heads, args.seq, args.vocab, args.positions)
        init_weights(model, args.seed)
        save_safetensors(args.out, model.named_arrays())
    elif args.cmd == "data":
        if args.text:
            with open(args.text, "rb") as f:
                toks = np.frombuffer(f.read(), dtype=np.uint8).astype(np.int64)
        else:
            toks = np.random.default_rng(args.seed).integers(0, args.vocab, args.tokens)
        write_shard(args.out, toks, shard_version(args.vocab))
    else:
        run_train(args, train)
    return 0


def run_train(args, train_fn):
    """The `train` command: train_fn(args, log) with each step printed and written to
    --metrics, then --export (llama_torch.py's train command runs this too)."""
    mf = open(args.metrics, "w") if args.metrics else None

    def log(rec):
        print(f"step {rec['step']:4d} loss {rec['loss']:.6f} lr {rec['lr']:.3e} "
              f"norm {rec['grad_norm']:.4f} {rec['step_time_s'] * 1e3:.1f} ms", flush=True)
        if mf:
            mf.write(json.dumps(rec) + "\n")
            mf.flush()

    model, _ = train_fn(args, log)
    if mf:
        mf.close()
    if args.export:
        save_safetensors(args.export, model.named_arrays())


if __name__ == "__main__":
    sys.exit(main())
