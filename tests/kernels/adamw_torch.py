"""Runs torch.optim.AdamW on the tensors in a binary file and writes the results.

Input file: one or more records of int32 n, int32 steps, 5 float64 (lr, beta1, beta2, eps,
weight_decay), float32 param (n) and grads (steps * n). Output, per record: float32 param,
exp_avg, exp_avg_sq after every step. (One process for all records: importing torch is slow.)
Used by test_adamw.cpp as the bit-level reference for mt::adamw_update.
"""
import struct
import sys

import numpy as np
import torch


def main(inp, out):
    with open(inp, "rb") as f, open(out, "wb") as fo:
        while header := f.read(8):
            n, steps = struct.unpack("<ii", header)
            scalars = struct.unpack("<5d", f.read(40))
            data = np.frombuffer(f.read(4 * n * (steps + 1)), dtype=np.float32)
            run(fo, n, steps, *scalars, data)


def run(f, n, steps, lr, beta1, beta2, eps, wd, data):
    param = torch.nn.Parameter(torch.from_numpy(data[:n].copy()))
    grads = data[n:].reshape(steps, n)
    opt = torch.optim.AdamW([param], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=wd,
                            foreach=False)
    for s in range(steps):
        param.grad = torch.from_numpy(grads[s].copy())
        opt.step()
        st = opt.state[param]
        for t in (param.detach(), st["exp_avg"], st["exp_avg_sq"]):
            f.write(t.numpy().astype(np.float32).tobytes())


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
