"""The --arch llama cases of test_vs_torch.py: meshtrain against llama_torch.py (docs/contracts.md §9)
with the GPT cases' tolerances, and what only these cases need:

  - inputs: an init file of §9 names, or (key "hf") a Hugging Face directory written by
    hf_dir.py, sharded and in bf16/f16 as the case says, which meshtrain reads with
    --init-from DIR: its shape then comes from config.json, so the case's flags hold only
    training flags;
  - MoE routing: the per-step expert_load and dropped_frac must be equal and aux_loss
    within AUX_RTOL (discrete choices: on a mismatch the report gives the reference's
    smallest top-k selection gap, to tell a near tie from a bug);
  - HF cases: step 1's loss equals the loss hf_dir.py computes for the directory on batch 0,
    and with rope_scaling, the loss without the scaling is far from it (the case sees it).

The cases need a meshtrain with --arch; engine_has_arch() says whether it has one.
"""
import argparse
import os
import subprocess

import torch

import gpt_torch as gpt
import hf_dir
import llama_torch as lt

AUX_RTOL = 1e-4  # aux loss: a mean of fp32 router probs times integer counts
NEAR_TIE = 1e-4  # relative; parameters may differ by up to PARAM_RTOL after 10 steps

TRAIN = ["--lr", "1e-3", "--min-lr", "1e-4", "--warmup", "2", "--lr-schedule", "cosine",
         "--weight-decay", "0.1", "--grad-clip", "1.0"]


def gqa(layers=3, ffn=160):
    """The small GQA 2:1 model most cases share."""
    return ["--arch", "llama", "--layers", str(layers), "--dim", "64", "--heads", "4",
            "--kv-heads", "2", "--ffn-dim", str(ffn), "--seq", "32", "--vocab", "256"]


ONE = ["--batch", "4", "--microbatches", "1", "--threads", "1"]
TWO = ["--batch", "8", "--microbatches", "2", "--threads", "2"]


def cases(bf16_tolerances):
    # MoE cases: router weights N(0, router_std) (logits of order 1, as in a trained model)
    # and the init seed whose 10 reference steps keep every top-k choice at least 1e-4
    # (relative) from a tie, so that rounding cannot route a token differently.
    return {
        # GQA 2:1, untied, 3 layers, defaults of --rope-theta and --norm-eps, clipping active.
        "llama_gqa": dict(flags=gqa() + ONE + TRAIN, data="text", must_clip=True),
        # --dropout: the masks of docs/contracts.md section 1 (dropout_masks.py) on the
        # embedding, the probabilities (inside meshtrain's flash core) and both branches, two
        # microbatches (their sequences' global tokens), GQA (a mask per query head).
        "llama_dropout": dict(flags=gqa(layers=2) + TWO + TRAIN + ["--dropout", "0.1"],
                              data="text"),
        # MQA, default --ffn-dim, vocab 2048, 2 microbatches, 2 threads, non-default theta/eps.
        "llama_mqa_v2048_mb2": dict(flags=[
            "--arch", "llama", "--layers", "2", "--dim", "128", "--heads", "4", "--kv-heads", "1",
            "--seq", "32", "--vocab", "2048", "--rope-theta", "10000", "--norm-eps", "1e-6"] + TWO + TRAIN,
            data="markov"),
        "llama_tied": dict(flags=[
            "--arch", "llama", "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
            "--ffn-dim", "128", "--seq", "32", "--vocab", "256", "--tie-embeddings"] + ONE + TRAIN,
            data="text"),
        # --head-dim 24 with C/H = 16: q is [96, 64], o_proj [64, 96].
        "llama_head_dim": dict(flags=[
            "--arch", "llama", "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
            "--head-dim", "24", "--ffn-dim", "96", "--seq", "32", "--vocab", "256"] + ONE + TRAIN,
            data="text"),
        # Llama 3.1 rope_scaling (only a config.json carries it): at theta 10000, hd 16 and
        # original_max_position_embeddings 32, one frequency is kept, one interpolated, six
        # slowed by the factor.
        "llama_rope_scaling": dict(flags=["--seq", "32"] + ONE + TRAIN, data="text", hf=dict(
            model=["--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                   "--ffn-dim", "128", "--vocab", "256", "--seq", "32", "--rope-theta", "10000",
                   "--rope-scaling-factor", "8", "--rope-scaling-low-freq-factor", "1",
                   "--rope-scaling-high-freq-factor", "4", "--rope-scaling-original-max-position", "32"],
            dtype="F32", shards=1, max_positions=128)),
        "llama_bf16": dict(flags=gqa(layers=2) + ONE + TRAIN + ["--precision", "bf16"],
                           data="text", **bf16_tolerances),
        "llama_v2048_bf16": dict(flags=[
            "--arch", "llama", "--layers", "3", "--dim", "128", "--heads", "4", "--kv-heads", "2",
            "--ffn-dim", "256", "--seq", "32", "--vocab", "2048"] + TWO + TRAIN + ["--precision", "bf16"],
            data="markov", **bf16_tolerances),
        # A Hugging Face directory as a real one comes: sharded, bf16, every key of a Llama 3
        # config.json, max_position_embeddings above --seq.
        "llama_hf_sharded_bf16": dict(flags=["--seq", "32"] + ONE + TRAIN, data="text", hf=dict(
            model=gqa()[2:], dtype="BF16", shards=2, max_positions=128)),
        # One f16 file, tied, a config.json with the contract's keys only.
        "llama_hf_f16_tied": dict(flags=["--seq", "32"] + ONE + TRAIN, data="text", hf=dict(
            model=["--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "1", "--ffn-dim", "128",
                   "--vocab", "256", "--seq", "32", "--tie-embeddings"],
            dtype="F16", shards=1, max_positions=32, minimal=True)),
        # MoE on the Llama block: softmax router, k 2, capacity drops, a shared expert, a dense
        # first layer; 2 microbatches (two aux-loss groups per step).
        "llama_moe_softmax": dict(flags=gqa(ffn=128) + [
            "--experts", "4", "--topk", "2",
            "--capacity-factor", "1.25", "--shared-experts", "1", "--first-dense-layers", "1",
            "--expert-ffn-dim", "64", "--aux-loss-coef", "0.01"] + TWO + TRAIN,
            data="text", router_std=0.25, init_seed=1),
        # DeepSeek-V3's router: sigmoid scores, bias-updated selection, routed scale; MoE on
        # every second layer, dropless.
        "llama_moe_sigmoid_bias": dict(flags=[
            "--arch", "llama", "--layers", "4", "--dim", "64", "--heads", "4", "--kv-heads", "2",
            "--ffn-dim", "128", "--seq", "32", "--vocab", "256", "--experts", "4", "--topk", "2",
            "--router", "sigmoid", "--routed-scale", "2.5", "--router-bias-update", "0.001",
            "--moe-every", "2", "--expert-ffn-dim", "64"] + ONE + TRAIN,
            data="text", router_std=0.25, init_seed=2),
    }


def is_llama(case):
    return "hf" in case or "--arch" in case["flags"]


_ARCH = {}


def engine_has_arch(meshtrain):
    """Whether `meshtrain train --help` lists --arch (the Llama model of issue #32)."""
    if meshtrain not in _ARCH:
        p = subprocess.run([meshtrain, "train", "--help"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        _ARCH[meshtrain] = "--arch" in p.stdout
    return _ARCH[meshtrain]


def parse(argv):
    return lt.train_parser(argparse.ArgumentParser()).parse_args(["--data", "-"] + argv)


def make_inputs(case, d, init_seed, make_data):
    """(init file or directory, token shard) of a Llama case."""
    hf = case.get("hf")
    s = lt.shape_from_args(parse(hf["model"] if hf else case["flags"]))
    model = lt.Llama(s)
    lt.init_weights(model, init_seed)
    if case.get("router_std"):  # spread the router's choices: no near ties in 10 steps
        g = torch.Generator().manual_seed(init_seed + 1)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith("mlp.gate.weight"):
                    p.copy_(torch.randn(p.shape, generator=g) * case["router_std"])
    W = model.named_arrays()
    if hf:
        init = os.path.join(d, "hf")
        cfg = hf_dir.config_of(s, hf["dtype"], hf["max_positions"], hf.get("minimal", False))
        hf_dir.write_dir(init, W, cfg, hf["dtype"], hf["shards"])
    else:
        init = os.path.join(d, "init.safetensors")
        gpt.save_safetensors(init, W)
    return init, make_data(case, s.V, d)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare_routing(name, mt_recs, ref_recs):
    if "expert_load" not in ref_recs[0]:
        return []
    bad = []
    for m, r in zip(mt_recs, ref_recs):
        if m.get("expert_load") != r["expert_load"]:
            bad.append(f"step {r['step']}: expert_load {m.get('expert_load')}, want {r['expert_load']}")
        if "aux_loss" not in m or rel(m["aux_loss"], r["aux_loss"]) > AUX_RTOL:
            bad.append(f"step {r['step']}: aux_loss {m.get('aux_loss')}, want {r['aux_loss']}")
        if abs(m.get("dropped_frac", -1) - r["dropped_frac"]) > 1e-12:
            bad.append(f"step {r['step']}: dropped_frac {m.get('dropped_frac')}, want {r['dropped_frac']}")
    margin = min(r["route_margin"] for r in ref_recs)
    print(f"[{name}] routing: smallest relative top-k selection gap of the reference {margin:.2e}; "
          f"aux_loss step 1 {ref_recs[0]['aux_loss']:.6f}, dropped_frac {ref_recs[0]['dropped_frac']:.4f}")
    if bad and margin < NEAR_TIE:
        bad.append(f"(the reference's routing came within {margin:.1e} of a tie: a choice made "
                   "differently there can be rounding, not a bug; try another --init-seed)")
    return bad


def hf_checks(name, case, init, data, mt_recs, loss_rtol):
    """Step 1's loss against the directory's (hf_dir.py); rope scaling must matter."""
    f = case["flags"]
    B, T = int(f[f.index("--batch") + 1]), int(f[f.index("--seq") + 1])
    want = hf_dir.loss_of_dir(init, data, B, T)
    bad = []
    print(f"[{name}] step-1 loss of the directory (hf_dir.py): {want:.7f}, meshtrain {mt_recs[0]['loss']:.7f}")
    if rel(mt_recs[0]["loss"], want) > loss_rtol:
        bad.append(f"step 1 loss {mt_recs[0]['loss']} is not the directory's {want} (rel > {loss_rtol})")
    s = lt.shape_from_args(parse(case["hf"]["model"]))
    if s.scaling:
        moved = rope_scaling_effect(init, data, B, T, s)
        print(f"[{name}] rope_scaling moves step 1's q/k gradients by {moved:.2e} (relative L2)")
        if moved < 1e-2:
            bad.append(f"rope_scaling moves the q/k gradients by {moved:.1e} only: the case cannot see it")
    return bad


def rope_scaling_effect(init, data, B, T, s):
    """|g - g0| / |g0| of step 1's q_proj/k_proj gradients with (g) and without (g0) the
    scaling: the loss at init barely depends on positions (the attention is near uniform),
    its gradients with respect to q and k do."""
    grads = []
    for scaling in (s.scaling, None):
        model = lt.build_model(parse(["--data", data, "--batch", str(B), "--seq", str(T),
                                      "--init-from", init]))
        model.cos, model.sin = lt.rope_tables(s.hd, T, s.theta, scaling)
        x, y = gpt.Loader(gpt.read_shard(data), B, T).next_batch()
        model(x, y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for n, p in model.named_parameters()
                                if n.endswith(("q_proj.weight", "k_proj.weight"))]))
    return ((grads[0] - grads[1]).norm() / grads[1].norm()).item()
