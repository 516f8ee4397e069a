#!/usr/bin/python3
"""The MoE layer (src/model/moe_layer.h) against PyTorch on the same weights and inputs.

Runs tests/moe_reference_driver, which writes its config, inputs, weights, outputs and
gradients, then recomputes everything in float64 from docs/contracts.md §1 (MoE variant) with
autograd, and exits non-zero on any mismatch. The reference is written independently of
the C++ (per-expert dense evaluation and masks, no permutation, a plain token-major loop
for drops), so it checks the math, not the implementation.
"""
import argparse
import math
import os
import struct
import subprocess
import sys

import torch

torch.set_default_dtype(torch.float64)


def read_records(path):
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos < len(data):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + n].decode()
        pos += n
        (nd,) = struct.unpack_from("<I", data, pos)
        pos += 4
        dims = struct.unpack_from("<%dq" % nd, data, pos)
        pos += 8 * nd
        count = math.prod(dims)
        vals = struct.unpack_from("<%df" % count, data, pos)
        pos += 4 * count
        out[name] = torch.tensor(vals, dtype=torch.float64).reshape(dims)
    return out


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def reference(rec):
    N, C, E, k = (int(v) for v in rec["config"][:4])
    F, alpha, aux_scale, gamma = (float(v) for v in rec["config"][4:])
    h = rec["h"].clone().requires_grad_(True)
    params = {name[6:]: t.clone().requires_grad_(True)
              for name, t in rec.items() if name.startswith("param:")}
    pre = "transformer.h.0.mlp."
    probs = torch.softmax(h @ params[pre + "router.weight"].T, dim=1)  # (N, E)
    scores = probs.detach() + (rec["bias"] if gamma > 0 else 0)
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices  # ties: lower e
    chosen = order[:, :k]
    # The float32 run must make the same discrete choices: refuse near-ties in the data.
    s = torch.sort(scores, dim=1, descending=True).values
    margins = [s[:, k - 1] - s[:, k]] if k < E else []
    if F > 0 and k > 1:
        margins += [s[:, j] - s[:, j + 1] for j in range(k - 1)]
    for m in margins:
        if m.min().item() < 1e-5:
            sys.exit("moe_torch: near tie in the test data (%g); change the seed" % m.min())

    gates = probs.gather(1, chosen)
    if k > 1:
        gates = gates / gates.sum(dim=1, keepdim=True)
    # Capacity drops, token-major over (token, choice).
    cap = math.ceil(N * k * F / E) if F > 0 else None
    keep = torch.ones(N, k)
    held = [0] * E
    for n in range(N):
        for j in range(k):
            e = int(chosen[n, j])
            if cap is not None and held[e] >= cap:
                keep[n, j] = 0
            else:
                held[e] += 1
    outs = []
    for e in range(E):
        q = pre + "experts.%d." % e
        hid = gelu_tanh(h @ params[q + "c_fc.weight"].T + params[q + "c_fc.bias"])
        outs.append(hid @ params[q + "c_proj.weight"].T + params[q + "c_proj.bias"])
    outs = torch.stack(outs)  # (E, N, C)
    tok = torch.arange(N)
    y = sum((keep[:, j] * gates[:, j]).unsqueeze(1) * outs[chosen[:, j], tok] for j in range(k))
    f = torch.bincount(chosen.reshape(-1), minlength=E).double() / (N * k)
    aux = alpha * E * (f * probs.mean(dim=0)).sum()
    loss = (y * rec["dy"]).sum() + aux_scale * aux
    loss.backward()
    load = torch.tensor([float(v) for v in held])
    want = {"y": y.detach(), "aux": aux.detach().reshape(1), "dh": h.grad,
            "load": load, "dropped": torch.tensor([float(N * k - sum(held))])}
    for name, t in params.items():
        want["grad:" + name] = t.grad
    return want


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--k", required=True)
    ap.add_argument("--capacity", required=True)
    ap.add_argument("--gamma", default="0")
    ap.add_argument("--workdir", default=".")
    a = ap.parse_args()
    out = os.path.join(a.workdir, "moe_ref_k%s_c%s_g%s.bin" % (a.k, a.capacity, a.gamma))
    subprocess.run([a.driver, out, a.k, a.capacity, a.gamma], check=True)
    rec = read_records(out)
    want = reference(rec)
    F = float(rec["config"][4])
    if F > 0 and want["dropped"].item() == 0:
        sys.exit("moe_torch: the capacity case dropped nothing; it would not test drops")
    failures = 0
    for name, w in want.items():
        got = rec[name]
        scale = max(1.0, w.abs().max().item())
        err = (got - w).abs().max().item()
        tol = 1e-5 * scale if name in ("load", "dropped") else 2e-5 * scale
        status = "ok" if err <= tol else "MISMATCH"
        failures += err > tol
        print("%-45s max|err| %.2e (scale %.2e) %s" % (name, err, scale, status))
    if failures:
        sys.exit("moe_torch: %d tensors differ from the PyTorch reference" % failures)
    print("moe_torch: all %d tensors match" % len(want))


if __name__ == "__main__":
    main()
