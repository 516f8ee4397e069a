#!/usr/bin/python3
"""Hugging Face Llama directories written and read by hand (the transformers library is not
used, nor needed): what `meshtrain train --init-from DIR` must accept (docs/contracts.md §9, §9a).

A directory holds
  config.json   LlamaConfig's keys: architectures ["LlamaForCausalLM"], model_type "llama",
                hidden_size, intermediate_size, num_attention_heads, num_key_value_heads,
                num_hidden_layers, head_dim, rms_norm_eps, rope_theta, rope_scaling (null, or
                Llama 3.1's {"rope_type": "llama3", "factor", "low_freq_factor",
                "high_freq_factor", "original_max_position_embeddings"}), vocab_size,
                max_position_embeddings, tie_word_embeddings, torch_dtype; by default also
                the keys a real Llama 3 config.json carries at the values meshtrain's model
                has (hidden_act "silu", no attention or MLP bias, ...). With MoE,
                DeepseekV3Config's MoE keys under model_type "meshtrain_moe" (§9a).
  weights       model.safetensors, or model-0000i-of-0000n.safetensors with
                model.safetensors.index.json {"metadata": {"total_size"}, "weight_map"};
                every tensor in one dtype: F32, BF16 (round to nearest even) or F16; each
                file's header carries {"__metadata__": {"format": "pt"}} as HF's do.
Tensor names are §9's (Hugging Face's own).

Subcommands:
  write   model flags of llama_torch.py [--from FILE.safetensors | --seed S] --out DIR
          [--dtype f32|bf16|f16] [--shards N] [--max-positions P] [--minimal-config]
  loss    --dir DIR --data SHARD --batch B --seq T: the mean cross-entropy PyTorch computes
          on global batch 0 (docs/contracts.md §3) with the directory's weights converted to fp32,
          i.e. step 1's loss of a run that starts from the directory
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

DTYPE_FLAGS = {"f32": "F32", "bf16": "BF16", "f16": "F16"}
INDEX = "model.safetensors.index.json"
MOE_KEYS = ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
            "n_shared_experts", "first_k_dense_replace", "routed_scaling_factor",
            "scoring_func", "norm_topk_prob", "moe_layer_freq")


def config_of(s, dtype="F32", max_positions=None, minimal=False):
    """config.json of llama_torch's shape s (shape_from_args)."""
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
         "hidden_size": s.C, "intermediate_size": s.F, "num_attention_heads": s.H,
         "num_key_value_heads": s.Hkv, "num_hidden_layers": s.L, "head_dim": s.hd,
         "rms_norm_eps": s.eps, "rope_theta": s.theta, "rope_scaling": s.scaling,
         "vocab_size": s.V, "max_position_embeddings": max_positions or s.T,
         "tie_word_embeddings": bool(s.tie),
         "torch_dtype": safetensors_io.TORCH_DTYPE_NAMES[dtype]}
    if not minimal:
        c.update({"attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
                  "eos_token_id": 2, "hidden_act": "silu", "initializer_range": 0.02,
                  "mlp_bias": False, "pretraining_tp": 1, "transformers_version": "4.45.0",
                  "use_cache": True})
    if s.moe is not None:
        m = s.moe
        c.update({"architectures": ["MeshtrainMoeForCausalLM"], "model_type": "meshtrain_moe",
                  "n_routed_experts": m.experts, "num_experts_per_tok": m.topk,
                  "moe_intermediate_size": m.expert_ffn_dim, "n_shared_experts": m.shared_experts,
                  "first_k_dense_replace": m.first_dense_layers,
                  "routed_scaling_factor": m.routed_scale, "scoring_func": m.router,
                  "norm_topk_prob": True, "moe_layer_freq": m.moe_every})
    return dict(sorted(c.items()))


def flags_of_config(c):
    """llama_torch argument names and values that config.json sets (the shape; --seq and
    the training flags stay the run's)."""
    if c.get("model_type") not in ("llama", "meshtrain_moe"):
        raise ValueError(f"config.json: model_type {c.get('model_type')!r} is not llama")
    f = {"layers": c["num_hidden_layers"], "dim": c["hidden_size"],
         "heads": c["num_attention_heads"],
         "kv_heads": c.get("num_key_value_heads", c["num_attention_heads"]),
         "head_dim": c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"],
         "ffn_dim": c["intermediate_size"], "vocab": c["vocab_size"],
         "norm_eps": c.get("rms_norm_eps", 1e-6), "rope_theta": c.get("rope_theta", 10000.0),
         "tie_embeddings": bool(c.get("tie_word_embeddings", False)),
         "rope_scaling_factor": 0.0}
    rs = c.get("rope_scaling")
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        if kind != "llama3":
            raise ValueError(f"config.json: rope_scaling type {kind!r} is not llama3")
        f.update(rope_scaling_factor=rs["factor"], rope_scaling_low_freq_factor=rs["low_freq_factor"],
                 rope_scaling_high_freq_factor=rs["high_freq_factor"],
                 rope_scaling_original_max_position=rs["original_max_position_embeddings"])
    if c["model_type"] == "meshtrain_moe":
        f.update(experts=c["n_routed_experts"], topk=c["num_experts_per_tok"],
                 expert_ffn_dim=c["moe_intermediate_size"], shared_experts=c["n_shared_experts"],
                 first_dense_layers=c["first_k_dense_replace"],
                 routed_scale=c["routed_scaling_factor"], router=c["scoring_func"],
                 moe_every=c["moe_layer_freq"])
    return f


def split_shards(names, sizes, shards):
    """Consecutive groups of names, of about equal bytes, none empty."""
    if not 1 <= shards <= len(names):
        raise ValueError(f"cannot split {len(names)} tensors into {shards} shards")
    total, groups, acc = sum(sizes), [[]], 0
    for i, (n, b) in enumerate(zip(names, sizes)):
        left, to_open = len(names) - i, shards - len(groups)
        if groups[-1] and to_open > 0 and (acc >= total * len(groups) / shards or left == to_open):
            groups.append([])
        groups[-1].append(n)
        acc += b
    return groups


def write_dir(path, tensors, config, dtype="F32", shards=1):
    """tensors: dict §9 name -> float32 array (written sorted by name, as HF's are)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    names = sorted(tensors)
    meta = {"format": "pt"}
    if shards == 1:
        safetensors_io.save(os.path.join(path, "model.safetensors"),
                            {n: tensors[n] for n in names}, dtype, meta)
        return
    item = safetensors_io.ITEM_BYTES[dtype]
    sizes = [int(np.asarray(tensors[n]).size) * item for n in names]
    weight_map = {}
    for i, group in enumerate(split_shards(names, sizes, shards)):
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        safetensors_io.save(os.path.join(path, fname), {n: tensors[n] for n in group}, dtype, meta)
        weight_map.update((n, fname) for n in group)
    with open(os.path.join(path, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}, f, indent=2)
        f.write("\n")


def read_dir(path):
    """(config dict, dict name -> float32 array) of a directory, sharded or not."""
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    dtypes = safetensors_io.DTYPES
    if not os.path.exists(os.path.join(path, INDEX)):
        return config, safetensors_io.load(os.path.join(path, "model.safetensors"), dtypes)
    with open(os.path.join(path, INDEX)) as f:
        weight_map = json.load(f)["weight_map"]
    tensors = {}
    for fname in sorted(set(weight_map.values())):
        want = {n for n, v in weight_map.items() if v == fname}
        got = safetensors_io.load(os.path.join(path, fname), dtypes, want)
        if set(got) != want:
            raise ValueError(f"{fname}: lacks {sorted(want - set(got))[:5]} of the weight map")
        tensors.update(got)
    return config, tensors


def loss_of_dir(path, data, batch, seq):
    """Mean cross-entropy on global batch 0 of data, the directory's weights in fp32."""
    import torch

    import gpt_torch as gpt
    import llama_torch

    args = llama_torch.train_parser(argparse.ArgumentParser()).parse_args(
        ["--data", data, "--batch", str(batch), "--seq", str(seq), "--init-from", path])
    model = llama_torch.build_model(args)
    x, y = gpt.Loader(gpt.read_shard(data), batch, seq).next_batch()
    with torch.no_grad():
        return model(x, y).item()


def main(argv=None):
    import llama_torch
    import gpt_torch as gpt

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    pw = sub.add_parser("write")
    gpt.add_model_flags(pw)
    llama_torch.add_llama_flags(pw)
    pw.add_argument("--from", dest="src", help="a safetensors file of §9 names (else --seed)")
    pw.add_argument("--out", required=True)
    pw.add_argument("--dtype", choices=sorted(DTYPE_FLAGS), default="f32")
    pw.add_argument("--shards", type=int, default=1)
    pw.add_argument("--max-positions", type=int, help="max_position_embeddings (default --seq)")
    pw.add_argument("--minimal-config", action="store_true", help="only the contract's keys")
    pl = sub.add_parser("loss")
    pl.add_argument("--dir", required=True)
    pl.add_argument("--data", required=True)
    pl.add_argument("--batch", type=int, required=True)
    pl.add_argument("--seq", type=int, required=True)
    a = ap.parse_args(argv)
    if a.cmd == "loss":
        print(f"{loss_of_dir(a.dir, a.data, a.batch, a.seq):.9g}")
        return 0
    shape = llama_torch.shape_from_args(a)
    model = llama_torch.Llama(shape)
    if a.src:
        model.load_named(gpt.load_safetensors(a.src))
    else:
        llama_torch.init_weights(model, a.seed)
    dtype = DTYPE_FLAGS[a.dtype]
    write_dir(a.out, model.named_arrays(), config_of(shape, dtype, a.max_positions, a.minimal_config),
              dtype, a.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
