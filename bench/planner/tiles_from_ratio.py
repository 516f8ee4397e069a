#!/usr/bin/env python3
"""Estimates a stored calibration's dense-tile figures (tiles_*_bf16, stop 40) from a newer
calibration that measured them beside oneDNN's figures in the same minutes: no timing runs.

Usage: python3 bench/planner/tiles_from_ratio.py NEW_PROFILE OLD_PROFILE > keys.txt
       sed '/^bf16_convert_s/r keys.txt' OLD_PROFILE > OLD_WITH_TILES

The tile probe's rates over oneDNN's at the same shapes (the block's two linears on 1024
rows, priced by the GEMM formula and the input-gradient ratio of NEW_PROFILE), and the pack
cost over to_bf16's, are carried to OLD_PROFILE's oneDNN figures. A ratio measured on a
loaded machine is an estimate, not a calibration: only a quiet `plan --calibrate` measures
the figures themselves."""
import re
import sys

SHAPES = [(1024, 1024, 512), (1024, 256, 1024)]  # M rows, N outputs, K inputs


def read(path):
    d = {}
    for line in open(path):
        m = re.match(r"^(\w+) = ([-\d.e+]+)\s*$", line)
        if m:
            d[m.group(1)] = float(m.group(2))
    return d


def onednn(d):
    t = f = 0.0
    for M, N, K in SHAPES:
        slow = 1 + d["gemm_half_rows_bf16"] / M + d["gemm_half_dim_bf16"] / min(N, K)
        flops = 2.0 * M * N * K
        t += flops * slow / d["peak_bf16"]
        f += flops
    return f / t, f / t / d["gemm_input_grad_ratio_bf16"]


def main():
    new, old = read(sys.argv[1]), read(sys.argv[2])
    nf, nb = onednn(new)
    of, ob = onednn(old)
    rf, rb = new["tiles_fwd_flops_bf16"] / nf, new["tiles_bwd_flops_bf16"] / nb
    rp = new["tiles_pack_s_bf16"] / new["bf16_convert_s"]
    print(f"tiles over oneDNN: forward {rf:.3f}, input gradient {rb:.3f}; pack over to_bf16 "
          f"{rp:.2f}", file=sys.stderr)
    print(f"tiles_fwd_flops_bf16 = {rf * of:.9e}")
    print(f"tiles_bwd_flops_bf16 = {rb * ob:.9e}")
    print(f"tiles_pack_s_bf16 = {rp * old['bf16_convert_s']:.9e}")


if __name__ == "__main__":
    main()
