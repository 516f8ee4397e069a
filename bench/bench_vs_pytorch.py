#!/usr/bin/python3
"""meshtrain vs PyTorch: the same GPT or Llama, the same init and batches, trained by both.

For each config and thread count it prints the median step time (warm-up steps
excluded), tokens/s, the speed ratio, and meshtrain's model-FLOPs utilisation against the
single-precision GEMM peak that this script measures itself (a small C++ probe compiled
here that calls oneDNN's dnnl_sgemm, the call meshtrain's matmuls make, on square
1024/2048 and on the model's own GEMM shapes; the best GFLOP/s wins).

PyTorch (Debian's 1.13, /usr/bin/python3) runs tests/reference/gpt_torch.py with
torch.set_num_threads(threads) and OPENBLAS_CORETYPE=SKYLAKEX; it is tried with
OPENBLAS_NUM_THREADS=1 and =threads, and the faster is reported (and named). (Unset
would let OpenBLAS's own pool use every core, i.e. 2 cores in a "1 thread" run.) Debian's
python3-torch links libblas.so.3, which is whatever BLAS the alternatives system selects:
with only libblas3 installed that is the netlib reference BLAS (~2.6 GFLOP/s per core
here), which would make any comparison meaningless. So when the system BLAS is not
OpenBLAS, pass --torch-blas-dir DIR (a directory holding OpenBLAS's libblas.so.3;
bench_vs_pytorch.sh extracts libopenblas0-pthread's there without installing it) and
PyTorch is also run with LD_LIBRARY_PATH=DIR; the best of all settings is reported.

Model FLOPs per token = 6 * (parameters without wpe) + 12 * layers * seq * dim
(forward + backward; attention counted over the full T x T), as meshtrain's own `mfu`.
For --arch llama the attention width is heads * head_dim and the parameters are the Llama
block's (GQA's narrower K/V, SwiGLU's three matrices, untied head), as ModelConfig counts them.
The llama configs "la"/"lb" have the GPT configs' "a"/"b" parameter count and sequence (GQA with
2 K/V heads, the SwiGLU width chosen to make up the difference), so the two archs' rows compare
the blocks at equal size.

--precision bf16 runs meshtrain with --precision bf16 (its `mfu` is then against the bf16
GEMM peak); --torch-precision fp32,bf16 runs PyTorch in fp32 and under
torch.autocast("cpu", dtype=torch.bfloat16) and reports meshtrain against each (the
best setting of each precision).

Usage: bench/bench_vs_pytorch.py [--meshtrain BIN] [--configs a,b] [--threads 1,2] [--arch gpt2|llama]
                                 [--steps 15] [--warmup-steps 3] [--repeats 2]
                                 [--torch-blas-dir DIR] [--write-docs FILE]
                                 [--precision fp32|bf16] [--torch-precision fp32,bf16]
"""
import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import gpt_torch as ref  # noqa: E402
import llama_torch  # noqa: E402

TORCH_PY = "/usr/bin/python3"
CONFIGS = {  # name: (layers, dim, heads, seq, batch, vocab)
    "a": (4, 256, 8, 128, 8, 256),
    "b": (6, 512, 8, 128, 8, 256),
}
# name: (layers, dim, heads, seq, batch, vocab, kv heads, ffn dim). 12 C^2 per GPT layer =
# 2.5 C^2 (q, o and two K/V heads of eight) + 3 C F, so F = 9.5 C / 3 (rounded to 16).
LLAMA_CONFIGS = {
    "la": (4, 256, 8, 128, 8, 256, 2, 816),
    "lb": (6, 512, 8, 128, 8, 256, 2, 1616),
}

PROBE_SRC = r"""
#include <oneapi/dnnl/dnnl.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
// argv: M N K transb seconds -> prints best GFLOP/s of C = A @ B(^T)
int main(int argc, char** argv) {
  long M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]);
  char tb = argv[4][0];
  double budget = atof(argv[5]), best = 0;
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N, 0.f);
  auto now = [] { return std::chrono::duration<double>(
      std::chrono::steady_clock::now().time_since_epoch()).count(); };
  long ldb = tb == 'T' ? K : N;
  dnnl_sgemm('N', tb, M, N, K, 1.f, a.data(), K, b.data(), ldb, 0.f, c.data(), N);
  double t_end = now() + budget;
  do {
    double t0 = now();
    dnnl_sgemm('N', tb, M, N, K, 1.f, a.data(), K, b.data(), ldb, 0.f, c.data(), N);
    double g = 2.0 * M * N * K / (now() - t0) * 1e-9;
    if (g > best) best = g;
  } while (now() < t_end);
  printf("%.3f\n", best);
}
"""


def build_probe(d):
    src, exe = os.path.join(d, "sgemm_probe.cpp"), os.path.join(d, "sgemm_probe")
    with open(src, "w") as f:
        f.write(PROBE_SRC)
    subprocess.run(["g++", "-O2", "-std=c++17", src, "-o", exe, "-ldnnl"], check=True)
    return exe


def sgemm_peak(probe, threads, cfg):
    """Best GFLOP/s of dnnl_sgemm at `threads` over square and model-shaped GEMMs."""
    L, C, H, T, B, V = cfg
    N = B * T
    shapes = [(1024, 1024, 1024, "N"), (2048, 2048, 2048, "N"),
              (N, 3 * C, C, "T"), (N, 4 * C, C, "T"), (N, C, 4 * C, "T")]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    best = 0.0
    for m, n, k, tb in shapes:
        out = subprocess.run([probe, str(m), str(n), str(k), tb, "0.6"], env=env, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        best = max(best, float(out))
    return best


def meshtrain_peak(meshtrain, threads):
    """`meshtrain bench gemm`: the peak meshtrain's own `mfu` divides by (None if absent)."""
    p = subprocess.run([meshtrain, "bench", "gemm", "--threads", str(threads)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"fp32 GEMM peak: ([0-9.]+) GFLOP/s", p.stdout)
    return float(m.group(1)) if p.returncode == 0 and m else None


def system_blas():
    return os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")


def torch_settings(blas_dir, threads):
    """(label, env, torch threads) for PyTorch: each BLAS library x OPENBLAS_NUM_THREADS
    1 / threads, plus torch.set_num_threads(1) on more cores (PyTorch 1.13 is often
    slower with 2 threads than with 1 here; its best setting is what we compare with)."""
    base = dict(os.environ, OPENBLAS_CORETYPE="SKYLAKEX")
    base.pop("OPENBLAS_NUM_THREADS", None)
    base.pop("LD_LIBRARY_PATH", None)
    libs = [("system " + os.path.basename(os.path.dirname(system_blas())), None)]
    if blas_dir:
        # netlib's reference BLAS is never PyTorch's best and takes minutes per config.
        if "openblas" not in system_blas():
            libs = []
        libs.append(("OpenBLAS via LD_LIBRARY_PATH", blas_dir))
    out = []
    for lib_label, d in libs:
        is_openblas = "openblas" in (d or system_blas())
        for nt in sorted({1, threads}) if is_openblas else (threads,):
            env = dict(base, OPENBLAS_NUM_THREADS=str(nt))
            if d:
                env["LD_LIBRARY_PATH"] = d
            out.append((f"{lib_label}, OPENBLAS_NUM_THREADS={nt}", env, threads))
            if threads > 1 and nt == 1:
                out.append((f"{lib_label}, OPENBLAS_NUM_THREADS=1, torch threads 1", env, 1))
    return out


def flops_per_token(cfg):
    if len(cfg) > 6:
        return llama_flops_per_token(cfg)
    L, C, H, T, B, V = cfg
    params = V * C + L * (12 * C * C + 13 * C) + 2 * C  # without wpe (T*C)
    return 6.0 * params + 12.0 * L * T * C


def llama_flops_per_token(cfg):
    """ModelConfig::flops_per_token for the Llama block (untied: embedding and head)."""
    L, C, H, T, B, V, kv, F = cfg
    hd = C // H
    block = C * H * hd + 2 * C * kv * hd + H * hd * C + 3 * C * F + 2 * C
    params = 2 * V * C + L * block + C
    return 6.0 * params + 12.0 * L * T * H * hd


def llama_flags(cfg):
    return ["--arch", "llama", "--kv-heads", str(cfg[6]), "--ffn-dim", str(cfg[7])]


def train_flags(cfg, threads, steps, data, init):
    L, C, H, T, B, V = cfg
    return ["--layers", str(L), "--dim", str(C), "--heads", str(H), "--seq", str(T),
            "--vocab", str(V), "--batch", str(B), "--microbatches", "1", "--steps", str(steps),
            "--lr", "6e-4", "--min-lr", "6e-5", "--warmup", "2", "--lr-schedule", "cosine",
            "--weight-decay", "0.1", "--grad-clip", "1.0", "--threads", str(threads),
            "--data", data, "--init-from", init]


def run_metrics(cmd, env, metrics):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"command failed ({p.returncode}): {shlex.join(cmd)}\n{p.stdout[-3000:]}")
    with open(metrics) as f:
        recs = [json.loads(line) for line in f if line.strip()]
    return [r for r in recs if "event" not in r]


def median_step(recs, warmup):
    return statistics.median(r["step_time_s"] for r in recs[warmup:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--meshtrain", default=os.path.join(ROOT, "build", "meshtrain"))
    ap.add_argument("--configs", default="a,b")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup-steps", type=int, default=3, help="excluded from the median")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each program; best median kept")
    ap.add_argument("--write-docs", help="write the results table (markdown) into this file")
    ap.add_argument("--torch-blas-dir", help="directory with OpenBLAS's libblas.so.3 for PyTorch")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="meshtrain's --precision")
    ap.add_argument("--torch-precision", default="fp32",
                    help="PyTorch runs: fp32 and/or bf16 (autocast), comma-separated")
    ap.add_argument("--arch", default="gpt2", choices=["gpt2", "llama"],
                    help="the model family (llama: configs la,lb of LLAMA_CONFIGS)")
    a = ap.parse_args()
    if a.arch == "llama" and a.configs == "a,b":
        a.configs = "la,lb"
    if a.steps <= a.warmup_steps:
        ap.error("--steps must exceed --warmup-steps")

    d = tempfile.mkdtemp(prefix="mt_bench_")
    probe = build_probe(d)
    data = os.path.join(d, "train.bin")
    import numpy as np
    ref.write_shard(data, np.random.default_rng(0).integers(0, 256, 1_000_000))
    rows = []
    for name in a.configs.split(","):
        cfg = LLAMA_CONFIGS[name] if a.arch == "llama" else CONFIGS[name]
        L, C, H, T, B, V = cfg[:6]
        init = os.path.join(d, f"init_{name}.safetensors")
        extra = llama_flags(cfg) if a.arch == "llama" else []
        if a.arch == "llama":
            llama_torch.main(["init", "--layers", str(L), "--dim", str(C), "--heads", str(H),
                              "--seq", str(T), "--vocab", str(V), "--seed", "1", "--out", init]
                             + extra[2:])
        else:
            model = ref.GPT(L, C, H, T, V)
            ref.init_weights(model, 1)
            ref.save_safetensors(init, model.named_arrays())
        script = "llama_torch.py" if a.arch == "llama" else "gpt_torch.py"
        for th in (int(t) for t in a.threads.split(",")):
            flags = train_flags(cfg[:6], th, a.steps, data, init) + extra
            mt_metrics, tm = os.path.join(d, "mt.jsonl"), os.path.join(d, "torch.jsonl")
            mt_cmd = [a.meshtrain, "train"] + flags + ["--metrics", mt_metrics,
                                                        "--precision", a.precision]
            pt_cmd = [TORCH_PY, os.path.join(ROOT, "tests", "reference", script),
                      "train"] + flags + ["--metrics", tm]  # a later --threads wins
            # Repeats alternate the two programs and keep each one's best median, so a
            # burst of load from elsewhere penalises neither side systematically.
            t_mt, torch_runs, losses = float("inf"), {}, {}
            for rep in range(a.repeats):
                recs = run_metrics(mt_cmd, dict(os.environ), mt_metrics)
                if median_step(recs, a.warmup_steps) < t_mt:
                    t_mt, mt = median_step(recs, a.warmup_steps), recs
                print(f"  {name}/{th}t meshtrain (run {rep + 1}): "
                      f"{median_step(recs, a.warmup_steps) * 1e3:.1f} ms/step", flush=True)
                for tprec, (label, env, pt_threads) in (
                        (tp, s) for tp in a.torch_precision.split(",")
                        for s in torch_settings(a.torch_blas_dir, th)):
                    label = f"{tprec}: {label}"
                    recs = run_metrics(pt_cmd + ["--threads", str(pt_threads), "--precision", tprec],
                                       env, tm)
                    t = median_step(recs, a.warmup_steps)
                    torch_runs[label] = min(torch_runs.get(label, float("inf")), t)
                    losses[label] = recs[-1]["loss"]
                    print(f"  {name}/{th}t PyTorch [{label}] (run {rep + 1}): {t * 1e3:.1f} ms/step",
                          flush=True)
            mt_mfu = statistics.median(r.get("mfu", 0.0) for r in mt[a.warmup_steps:])
            best = min(torch_runs, key=torch_runs.get)
            t_pt = torch_runs[best]
            # The best setting of each PyTorch precision, and meshtrain's speed-up over it.
            by_precision = {}
            for tprec in a.torch_precision.split(","):
                runs = {k: v for k, v in torch_runs.items() if k.startswith(tprec + ":")}
                k = min(runs, key=runs.get)
                by_precision[tprec] = dict(setting=k, ms=runs[k] * 1e3, ratio=runs[k] / t_mt)
            probe_peak = sgemm_peak(probe, th, cfg[:6])
            mt_peak = meshtrain_peak(a.meshtrain, th)
            # A peak is what the hardware can sustain: load from elsewhere only ever lowers
            # a measurement, so the higher of the two is the better estimate.
            peak = max(mt_peak or 0.0, probe_peak)
            tok = B * T
            mfu = flops_per_token(cfg) * tok / t_mt / (peak * 1e9)  # vs the better peak
            shape = f"{L}L d{C} h{H} T{T} B{B} V{V}"
            if a.arch == "llama":
                shape += f" kv{cfg[6]} ffn{cfg[7]}"
            row = dict(config=name, shape=shape, threads=th,
                       mt_ms=t_mt * 1e3, mt_tps=tok / t_mt, pt_ms=t_pt * 1e3, pt_tps=tok / t_pt,
                       ratio=t_pt / t_mt, pt_setting=best,
                       pt_all={k: round(v * 1e3, 1) for k, v in torch_runs.items()},
                       peak=peak, probe_peak=probe_peak, mt_peak=mt_peak, mfu=mfu,
                       mt_mfu=mt_mfu, loss_mt=mt[-1]["loss"], loss_pt=losses[best],
                       mt_precision=a.precision, torch_by_precision=by_precision)
            rows.append(row)
            print(json.dumps(row), flush=True)
    table = render(rows, a)
    print(table)
    if a.write_docs:
        with open(a.write_docs, "w") as f:
            f.write(table)


def render(rows, a):
    lines = ["| config | threads | meshtrain ms/step | meshtrain tok/s | PyTorch ms/step (best) | "
             "PyTorch tok/s | speedup | sgemm peak GFLOP/s (bench gemm / probe) | "
             "MFU vs sgemm peak | meshtrain `mfu` (vs its precision's peak) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mp = f"{r['mt_peak']:.1f}" if r["mt_peak"] else "n/a"
        lines.append(
            f"| {r['config']}: {r['shape']} | {r['threads']} | {r['mt_ms']:.1f} | {r['mt_tps']:.0f} | "
            f"{r['pt_ms']:.1f} | {r['pt_tps']:.0f} | **{r['ratio']:.2f}x** | {mp} / "
            f"{r['probe_peak']:.1f} | {100 * r['mfu']:.1f}% | {100 * r['mt_mfu']:.1f}% |")
    lines.append("")
    if rows and rows[0]["mt_precision"] == "bf16":
        # The sgemm column is the fp32 yardstick PyTorch fp32 is held to; a bf16 run can pass
        # 100% of it. meshtrain's own `mfu` divides by the bf16 GEMM peak it measures.
        lines.append("MFU vs sgemm peak exceeds 100% for a bf16 run: bf16 GEMMs run faster than "
                     "the fp32 peak; meshtrain's `mfu` column is against the bf16 GEMM peak.")
        lines.append("")
    lines.append(f"meshtrain ran with --precision {rows[0]['mt_precision'] if rows else '?'}; "
                 "against each PyTorch precision's best setting:")
    lines.append("")
    for r in rows:
        lines.append(f"- {r['config']}/{r['threads']} thread(s): " + "; ".join(
            f"PyTorch {p} {v['ms']:.1f} ms/step -> meshtrain {v['ratio']:.2f}x"
            for p, v in r["torch_by_precision"].items()))
    lines.append("")
    lines.append("PyTorch settings tried (median ms/step; the best is in the table):")
    lines.append("")
    for r in rows:
        lines.append(f"- {r['config']}/{r['threads']} thread(s): " + "; ".join(
            f"{k}: {v} ms" for k, v in r["pt_all"].items()))
    lines.append("")
    lines.append(f"Median step time over steps {a.warmup_steps + 1}..{a.steps} (first "
                 f"{a.warmup_steps} excluded), best of {a.repeats} alternating runs per program. "
                 "Final-step loss of each run, as a sanity check that both trained the same "
                 "model: " + ", ".join(
                     f"{r['config']}/{r['threads']}t {r['loss_mt']:.4f} vs {r['loss_pt']:.4f}"
                     for r in rows))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
