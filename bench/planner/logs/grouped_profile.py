#!/usr/bin/env python3
"""A profile of the quiet 11:47 session (bench36_local.toml) as a calibration with the grouped
expert GEMM probe would have written it, for the offline check (replay_logs.py): no timing.

Usage: python3 bench/planner/logs/grouped_profile.py IN.toml OUT.toml FWD BWD WGT FWD16 BWD16 WGT16
       (the grouped rates, GFLOP/s per thread: fp32 forward / input / weight gradient, bf16)

The MoE rest probe (kernel_probes.cpp, moe_layer_costs) stores rest = (t_layer - model) /
elems per pass, model the planner's GEMM time for the layer's router and experts: from the
logged rest and the old model (per-expert GEMMs on the linears' path; bf16: the rest was at
its floor 1e-3 t / elems, so t = rest x elems x 1000) this recovers the layer's measured
time t per pass and stores the rest the new model (router + grouped FLOPs / rate) leaves.
At the reference shape the new MoE cost is then t whatever the rates; every closed-loop MoE
layout has C 256, where rows x C x H / rate and rows x H x rest both scale with rows x H, so
the logged layouts' predictions do not depend on the rates given (check: two sets of rates
give the same replay).
"""
import re
import sys

N, C, E, TOPK = 1024, 256, 4, 2
H = 4 * C
ROWS = N * TOPK
ELEMS = ROWS * H


def fields(text):
    return {m[1]: float(m[2]) for m in re.finditer(r"^(\w+) = ([-+0-9.e]+)$", text, re.M)}


def gemm(f, M, Nn, K, peak, half, bw, over, elem=4):
    d = min(M, Nn, K)
    eff = d / (d + half)
    return max(2 * M * Nn * K / (peak * eff), (M * K + K * Nn + M * Nn) * elem / bw) + over


def old_fp32_model(f):
    """local_moe_costs on the fp32 path of a profile without grouped figures, even rows."""
    g = lambda M, Nn, K: gemm(f, M, Nn, K, f["peak_fp32"], f["gemm_half_dim"], f["memory_bw"],
                              f["kernel_overhead_s"])
    ri, rw = f["gemm_input_grad_ratio"], f["gemm_weight_grad_ratio"]
    router = g(N, E, C)
    fwd, bwd, wgt = router, router * ri, g(E, C, N) * rw
    r = ROWS / E
    for _ in range(E):
        one = g(r, H, C) + g(r, C, H)
        fwd += one
        bwd += one * ri
        wgt += (g(H, C, r) + g(C, H, r)) * rw
    return fwd, bwd, wgt


def router32(f):
    g = lambda M, Nn, K: gemm(f, M, Nn, K, f["peak_fp32"], f["gemm_half_dim"], f["memory_bw"],
                              f["kernel_overhead_s"])
    return (g(N, E, C), g(N, E, C) * f["gemm_input_grad_ratio"],
            g(E, C, N) * f["gemm_weight_grad_ratio"])


def main():
    src, dst = sys.argv[1], sys.argv[2]
    rates = [float(x) * 1e9 for x in sys.argv[3:9]]
    text = open(src).read()
    f = fields(text)
    flops = 2 * 2 * ROWS * C * H
    keys32 = ("moe_fwd_s", "moe_bwd_s", "moe_wgt_s")
    keys16 = tuple(k + "_bf16" for k in keys32)
    t32 = [f[k] * ELEMS + m for k, m in zip(keys32, old_fp32_model(f))]
    t16 = [f[k] * ELEMS * 1000 for k in keys16]  # the rest was at its floor
    new = {}
    for keys, ts, rs in ((keys32, t32, rates[:3]), (keys16, t16, rates[3:])):
        for k, t, rate, router in zip(keys, ts, rs, router32(f)):
            new[k] = max(t - router - flops / rate, 1e-3 * t) / ELEMS
    names = ["grouped_fwd_flops", "grouped_bwd_flops", "grouped_wgt_flops",
             "grouped_fwd_flops_bf16", "grouped_bwd_flops_bf16", "grouped_wgt_flops_bf16"]
    for k, v in new.items():
        text = re.sub(rf"^{k} = .*$", f"{k} = {v:.9e}", text, flags=re.M)
    extra = "".join(f"{n} = {r:.9e}\n" for n, r in zip(names, rates))
    text = text.replace("moe_fwd_s = ", extra + "moe_fwd_s = ", 1)
    open(dst, "w").write(text)
    print("layer per pass, ms: fp32", " ".join(f"{t * 1e3:.2f}" for t in t32), "bf16",
          " ".join(f"{t * 1e3:.2f}" for t in t16))


if __name__ == "__main__":
    main()
