#!/usr/bin/python3
"""Checks the file side of the Llama reference: safetensors in F32/BF16/F16
(safetensors_io.py), Hugging Face directories (hf_dir.py: config.json keys, single and
sharded weights, the index), the names and init of llama_torch.py's tensors (docs/contracts.md §9),
and version-2 token shards (§10). Needs no meshtrain binary. Exits non-zero on a failure."""
import argparse
import glob
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_torch as gpt  # noqa: E402
import hf_dir  # noqa: E402
import llama_torch as lt  # noqa: E402
import safetensors_io  # noqa: E402

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        failures.append(name)


def args_of(argv):
    return lt.train_parser(argparse.ArgumentParser()).parse_args(["--data", "-"] + argv)


def bf16_rne(a):
    """float32 -> bfloat16 bits, round to nearest, ties to even, done on the integer bits."""
    bits = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_dtypes():
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 0.02,
                        np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 65504, 3e-8], np.float32)])
    raw = safetensors_io.encode(a, "BF16")
    check("bf16 encode = round to nearest even", np.array_equal(np.frombuffer(raw, "<u2"), bf16_rne(a)))
    back = safetensors_io.decode(raw, "BF16", a.shape)
    check("bf16 decode is exact (top half of a float32)",
          np.array_equal(back.view(np.uint32), bf16_rne(a).astype(np.uint32) << 16))
    f16 = safetensors_io.decode(safetensors_io.encode(a, "F16"), "F16", a.shape)
    check("f16 round trip = numpy's float16", np.array_equal(f16, a.astype(np.float16).astype(np.float32)))


def test_names_and_init():
    s = lt.shape_from_args(args_of(["--layers", "4", "--dim", "64", "--heads", "4", "--kv-heads", "2",
                                    "--head-dim", "24", "--ffn-dim", "96", "--vocab", "300"]))
    m = lt.Llama(s)
    lt.init_weights(m, 1)
    W = m.named_arrays()
    want = {"model.embed_tokens.weight": (300, 64), "lm_head.weight": (300, 64), "model.norm.weight": (64,)}
    for i in range(4):
        p = f"model.layers.{i}."
        want.update({p + "input_layernorm.weight": (64,), p + "post_attention_layernorm.weight": (64,),
                     p + "self_attn.q_proj.weight": (96, 64), p + "self_attn.k_proj.weight": (48, 64),
                     p + "self_attn.v_proj.weight": (48, 64), p + "self_attn.o_proj.weight": (64, 96),
                     p + "mlp.gate_proj.weight": (96, 64), p + "mlp.up_proj.weight": (96, 64),
                     p + "mlp.down_proj.weight": (64, 96)})
    check("names and shapes = docs/contracts.md §9", {n: a.shape for n, a in W.items()} == want)
    proj = 0.02 / math.sqrt(8)
    stds = {n: a.std() for n, a in W.items() if a.ndim == 2}
    ok = all(abs(sd - (proj if n.endswith(("o_proj.weight", "down_proj.weight")) else 0.02)) < 0.1 * sd
             for n, sd in stds.items())
    check("init: N(0, 0.02), o_proj/down_proj N(0, 0.02/sqrt(2L)), norms 1",
          ok and all((a == 1).all() for a in W.values() if a.ndim == 1))
    tied = lt.Llama(lt.shape_from_args(args_of(["--tie-embeddings", "--vocab", "50"])))
    check("tied: no lm_head.weight", "lm_head.weight" not in tied.named_arrays())
    off = args_of(["--tie-embeddings=false"])
    check("--tie-embeddings=false is accepted and off", off.tie_embeddings is False)
    moe = lt.Llama(lt.shape_from_args(args_of(
        ["--layers", "3", "--experts", "2", "--shared-experts", "1", "--first-dense-layers", "1",
         "--router-bias-update", "0.1", "--expert-ffn-dim", "16"])))
    names = set(moe.named_arrays())
    check("MoE names: gate, e_score_correction_bias, experts, shared_experts; dense first layer",
          {"model.layers.1.mlp.gate.weight", "model.layers.2.mlp.gate.e_score_correction_bias",
           "model.layers.1.mlp.experts.1.down_proj.weight",
           "model.layers.2.mlp.shared_experts.up_proj.weight",
           "model.layers.0.mlp.gate_proj.weight"} <= names
          and not any(n.startswith("model.layers.0.mlp.gate.") for n in names))


SHAPES = {
    "gqa": ["--layers", "2", "--dim", "32", "--heads", "4", "--kv-heads", "2", "--ffn-dim", "48",
            "--vocab", "64", "--seq", "16"],
    "tied scaled": ["--layers", "1", "--dim", "32", "--heads", "2", "--head-dim", "8", "--vocab", "64",
                    "--seq", "16", "--tie-embeddings", "--rope-theta", "10000", "--norm-eps", "1e-6",
                    "--rope-scaling-factor", "8", "--rope-scaling-original-max-position", "8"],
    "moe": ["--layers", "2", "--dim", "32", "--heads", "2", "--vocab", "64", "--seq", "16",
            "--experts", "4", "--topk", "2", "--shared-experts", "1", "--router", "sigmoid",
            "--routed-scale", "2", "--first-dense-layers", "1", "--expert-ffn-dim", "8"],
}


def test_directories():
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "t.bin")
        gpt.write_shard(data, np.random.default_rng(1).integers(0, 64, 4000))
        for label, argv in SHAPES.items():
            s = lt.shape_from_args(args_of(argv))
            m = lt.Llama(s)
            lt.init_weights(m, 2)
            W = m.named_arrays()
            for dtype, shards in (("F32", 1), ("BF16", 3), ("F16", 2)):
                out = os.path.join(d, f"{label}_{dtype}".replace(" ", "_"))
                cfg = hf_dir.config_of(s, dtype, max_positions=64)
                hf_dir.write_dir(out, W, cfg, dtype, shards)
                check_dir(f"[{label} {dtype} x{shards}]", out, W, s, dtype, shards, data)


def check_dir(name, out, W, s, dtype, shards, data):
    config, back = hf_dir.read_dir(out)
    rounded = {n: safetensors_io.decode(safetensors_io.encode(a, dtype), dtype, a.shape) for n, a in W.items()}
    check(f"{name} read back = the {dtype} roundings", set(back) == set(W)
          and all(np.array_equal(back[n], rounded[n]) for n in W))
    keys = {"architectures", "model_type", "hidden_size", "intermediate_size", "num_attention_heads",
            "num_key_value_heads", "num_hidden_layers", "rms_norm_eps", "rope_theta", "vocab_size",
            "max_position_embeddings", "tie_word_embeddings", "torch_dtype", "head_dim"}
    check(f"{name} config.json has the contract's keys", keys <= set(config)
          and config["torch_dtype"] == safetensors_io.TORCH_DTYPE_NAMES[dtype])
    a = args_of(["--seq", str(s.T)])
    for k, v in hf_dir.flags_of_config(config).items():
        setattr(a, k, v)
    check(f"{name} config.json gives back the shape", vars(lt.shape_from_args(a)) == vars(s))
    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(out, "*.safetensors")))
    if shards == 1:
        check(f"{name} one model.safetensors", files == ["model.safetensors"])
    else:
        with open(os.path.join(out, hf_dir.INDEX)) as f:
            index = json.load(f)
        want = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
        total = sum(a.size * safetensors_io.ITEM_BYTES[dtype] for a in W.values())
        headers = [safetensors_io.read_header(os.path.join(out, f)) for f in files]
        check(f"{name} shards, index total_size and weight_map", files == want
              and index["metadata"]["total_size"] == total and set(index["weight_map"]) == set(W)
              and set(index["weight_map"].values()) == set(want)
              and all(h["__metadata__"] == {"format": "pt"} and len(h) > 1 for h in headers))
    loss = hf_dir.loss_of_dir(out, data, 2, s.T)
    m = lt.Llama(s)
    m.load_named(rounded)
    x, y = gpt.Loader(gpt.read_shard(data), 2, s.T).next_batch()
    with torch.no_grad():
        want_loss = m(x, y).item()
        m.load_named(W)
        fp32_loss = m(x, y).item()
    check(f"{name} loss of the directory = the model's on its weights", loss == want_loss,
          f"{loss:.7f} (fp32 weights {fp32_loss:.7f})")
    if dtype != "F32":  # else a reader that ignored the dtype could pass
        check(f"{name} the stored dtype changes the weights", any(
            not np.array_equal(rounded[n], W[n]) for n in W) and (dtype != "BF16" or loss != fp32_loss))


def test_train_from_dir():
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "t.bin")
        gpt.write_shard(data, np.random.default_rng(3).integers(0, 64, 4000))
        s = lt.shape_from_args(args_of(SHAPES["gqa"]))
        m = lt.Llama(s)
        lt.init_weights(m, 4)
        hf_dir.write_dir(os.path.join(d, "hf"), m.named_arrays(), hf_dir.config_of(s, "BF16", 64), "BF16", 2)
        a = args_of(["--data", data, "--init-from", os.path.join(d, "hf"), "--seq", "8", "--batch", "4",
                     "--steps", "2", "--microbatches", "2"])
        _, recs = lt.train(a)
        want = hf_dir.loss_of_dir(os.path.join(d, "hf"), data, 4, 8)
        check("train --init-from DIR: shape from config.json, step 1 loss = the directory's",
              a.layers == 2 and a.kv_heads == 2 and abs(recs[0]["loss"] - want) < 1e-6 * want,
              f"{recs[0]['loss']:.7f} {want:.7f}")


def test_llama_cases_build():
    """Every --arch llama case of test_vs_torch.py parses and writes its inputs (those cases
    only run once the engine has --arch; a typo in one should not wait for that)."""
    import test_vs_torch as tv

    names = [n for n, c in tv.CASES.items() if tv.llama_cases.is_llama(c)]
    bad = []
    with tempfile.TemporaryDirectory() as d:
        for n in names:
            case = tv.CASES[n]
            os.makedirs(os.path.join(d, n))
            init, data = tv.make_inputs(case, os.path.join(d, n), case.get("init_seed", 1234))
            a = args_of(tv.COMMON + case["flags"] + ["--data", data, "--init-from", init])
            try:
                model = lt.build_model(a)
            except ValueError as e:
                bad.append(f"{n}: {e}")
                continue
            if "hf" in case and not os.path.isdir(init):
                bad.append(f"{n}: no directory")
            if model.s.V <= int(gpt.read_shard(data).max()):
                bad.append(f"{n}: tokens beyond the vocabulary")
    check(f"the {len(names)} llama cases of test_vs_torch.py build their inputs", names and not bad, str(bad))


def test_wide_shards():
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "w.bin")
        toks = np.array([0, 65535, 65536, 128255, 2 ** 31 - 2])
        gpt.write_shard(p, toks)
        header = np.fromfile(p, "<i4", 3)
        check("version-2 shard: header [20240520, 2, n], 4-byte tokens",
              list(header) == [20240520, 2, 5] and os.path.getsize(p) == 1024 + 4 * 5
              and np.array_equal(gpt.read_shard(p), toks))
        gpt.write_shard(p, np.array([0, 65535]))
        check("tokens below 65,536 keep version 1", list(np.fromfile(p, "<i4", 2)) == [20240520, 1]
              and os.path.getsize(p) == 1024 + 2 * 2)


if __name__ == "__main__":
    torch.set_num_threads(1)
    for t in (test_dtypes, test_names_and_init, test_directories, test_train_from_dir,
              test_llama_cases_build, test_wide_shards):
        t()
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("all hf_dir / safetensors self-checks passed")
