"""The closed loop's layouts and model (closed_loop.py): the shapes every layout trains and
the command-line knobs that fix a layout for `meshtrain plan` and `meshtrain train`.
MODEL is the model in use (closed_loop.py's --model sets it)."""

# The default model is large enough that the GEMMs dominate a step (4 layers, d 256, T 128:
# ~70% of a one-rank fp32 step in the linears), as in real runs; --model tiny is the
# 4-layer d128 T64 model of the first closed loop, where per-step overheads dominate.
MODELS = {
    "medium": ["--layers", "4", "--dim", "256", "--heads", "8", "--seq", "128", "--vocab",
               "256", "--batch", "8"],
    "tiny": ["--layers", "4", "--dim", "128", "--heads", "4", "--seq", "64", "--vocab", "256",
             "--batch", "16"],
}
MODEL = MODELS["medium"]


def batch():
    return int(MODEL[MODEL.index("--batch") + 1])


def _lay(name, ranks, **k):
    k.setdefault("dp", 1)
    k.setdefault("tp", 1)
    k.setdefault("pp", 1)
    return (name, ranks, k)


# name, ranks, knobs; mb is sequences per microbatch as a fraction of the batch per replica
# (mb_div: batch / dp / mb_div), so the list works for any --batch.
LAYOUTS = [
    _lay("1 rank", 1, mb_div=1),
    _lay("1 rank m4", 1, mb_div=4),
    _lay("1 rank selective", 1, mb_div=1, recompute="selective"),
    _lay("1 rank full", 1, mb_div=1, recompute="full"),
    _lay("dp2 z0", 2, dp=2, mb_div=1),
    _lay("dp2 z1", 2, dp=2, mb_div=1, zero=1),
    _lay("dp2 z2 m2", 2, dp=2, mb_div=2, zero=2),
    _lay("dp2 z3", 2, dp=2, mb_div=1, zero=3),
    _lay("tp2", 2, tp=2, mb_div=1),
    _lay("tp2 sp", 2, tp=2, mb_div=1, sp=True),
    _lay("tp2 sp selective", 2, tp=2, mb_div=1, sp=True, recompute="selective"),
    _lay("pp2 1f1b m4", 2, pp=2, mb_div=4, schedule="1f1b"),
    _lay("pp2 gpipe m4", 2, pp=2, mb_div=4, schedule="gpipe"),
    _lay("pp2 zb-h1 m8", 2, pp=2, mb_div=8, schedule="zb-h1"),
    _lay("pp2 interleaved v2 m4", 2, pp=2, mb_div=4, schedule="interleaved", v=2),
    _lay("moe ep2 dp2", 2, dp=2, mb_div=1, ep=2, experts=4),
    _lay("moe 1 rank", 1, mb_div=1, experts=4),
    _lay("dp2 tp2", 4, dp=2, tp=2, mb_div=1),
    _lay("dp2 pp2 m4", 4, dp=2, pp=2, mb_div=4),
    _lay("bf16 1 rank", 1, mb_div=1, precision="bf16"),
    _lay("bf16 1 rank m4", 1, mb_div=4, precision="bf16"),
    _lay("bf16 1 rank selective", 1, mb_div=1, recompute="selective", precision="bf16"),
    _lay("bf16 1 rank full", 1, mb_div=1, recompute="full", precision="bf16"),
    _lay("bf16 dp2 z0", 2, dp=2, mb_div=1, precision="bf16"),
    _lay("bf16 dp2 z3", 2, dp=2, mb_div=1, zero=3, precision="bf16"),
    _lay("bf16 tp2 sp", 2, tp=2, mb_div=1, sp=True, precision="bf16"),
    _lay("bf16 pp2 1f1b m4", 2, pp=2, mb_div=4, schedule="1f1b", precision="bf16"),
    _lay("bf16 moe ep2 dp2", 2, dp=2, mb_div=1, ep=2, experts=4, precision="bf16"),
    _lay("bf16 moe 1 rank", 1, mb_div=1, experts=4, precision="bf16"),
    _lay("bf16 dp2 tp2", 4, dp=2, tp=2, mb_div=1, precision="bf16"),
    # The Llama block (RMSNorm, RoPE, GQA with half the heads as kv heads, SwiGLU, flash
    # attention, untied head): added with the planner's llama cost model, not yet measured.
    _lay("llama 1 rank", 1, mb_div=1, arch="llama"),
    _lay("llama dp2 z1", 2, dp=2, mb_div=1, zero=1, arch="llama"),
    _lay("llama tp2 sp", 2, tp=2, mb_div=1, sp=True, arch="llama"),
    _lay("llama pp2 1f1b m4", 2, pp=2, mb_div=4, schedule="1f1b", arch="llama"),
    _lay("bf16 llama 1 rank", 1, mb_div=1, precision="bf16", arch="llama"),
    # DualPipe-V (the V of 2 chunks per stage; m >= 2 pp), context parallelism (llama block,
    # ring and all-gather) and DeepSeek-style MoE (SwiGLU experts of their own width, a
    # shared expert, the first layer dense, sigmoid router): added with their planner models.
    _lay("pp2 dualpipev m4", 2, pp=2, mb_div=4, schedule="dualpipev", v=2),
    _lay("pp2 dualpipev m8", 2, pp=2, mb_div=8, schedule="dualpipev", v=2),
    _lay("llama pp2 dualpipev m4", 2, pp=2, mb_div=4, schedule="dualpipev", v=2, arch="llama"),
    _lay("bf16 pp2 dualpipev m4", 2, pp=2, mb_div=4, schedule="dualpipev", v=2,
         precision="bf16"),
    _lay("dp2 pp2 dualpipev m4", 4, dp=2, pp=2, mb_div=4, schedule="dualpipev", v=2),
    _lay("llama cp2 ring", 2, cp=2, mb_div=1, arch="llama"),
    _lay("llama cp2 allgather", 2, cp=2, cp_comm="allgather", mb_div=1, arch="llama"),
    _lay("llama dp2 cp2", 4, dp=2, cp=2, mb_div=1, arch="llama"),
    _lay("bf16 llama cp2 ring", 2, cp=2, mb_div=1, arch="llama", precision="bf16"),
    # cp under pp on 2 cores (issue #30: a stage's cp ranks share its cores; the brute
    # force's first choice was a cp2 x pp2 DualPipe-V layout predicted at half its time).
    _lay("llama cp2 pp2 dualpipev m4", 4, cp=2, pp=2, mb_div=4, schedule="dualpipev", v=2,
         arch="llama"),
    _lay("llama deepseek-moe 1 rank", 1, mb_div=1, arch="llama", deepseek=True),
    _lay("llama deepseek-moe ep2 dp2", 2, dp=2, ep=2, mb_div=1, arch="llama", deepseek=True),
    # The overlapped exchange (--moe-overlap-parts 2, model/moe_parts.h): the shared expert
    # under the first dispatch and the last combine; at ZeRO 0 the routed experts' weight
    # gradients in B under the last backward combine, at ZeRO 2 in W.
    _lay("llama deepseek-moe ep2 dp2 parts2", 2, dp=2, ep=2, mb_div=1, arch="llama",
         deepseek=True, parts=2),
    _lay("llama deepseek-moe ep2 dp2 z2 parts2", 2, dp=2, ep=2, mb_div=1, zero=2,
         arch="llama", deepseek=True, parts=2),
    # Four ranks on 2 cores where the brute force's single passes disagreed most with the
    # model (issue #30): tp 4 in one and in eight microbatches (the collectives' waits among
    # ranks that share the cores), pp 4 in two and eight (stages that idle in the bubble
    # leave their core to the others).
    _lay("llama tp4 sp m1", 4, tp=4, sp=True, mb_div=1, arch="llama"),
    _lay("llama tp4 sp m8", 4, tp=4, sp=True, mb_div=8, arch="llama"),
    _lay("llama pp4 1f1b m2", 4, pp=4, mb_div=2, schedule="1f1b", arch="llama"),
    _lay("llama pp4 zb-h1 m8", 4, pp=4, mb_div=8, schedule="zb-h1", arch="llama"),
]


def resolve(k):
    """Fills mb (sequences per microbatch) from mb_div for the model's batch."""
    k = dict(k)
    if "mb" not in k:
        k["mb"] = batch() // (k["dp"] * k.pop("mb_div", 1))
    return k


def knob_args(k, plan):
    a = ["--dp", str(k["dp"]), "--tp", str(k["tp"]), "--pp", str(k["pp"]),
         "--zero", str(k.get("zero", 0)), "--recompute", k.get("recompute", "none")]
    if k.get("ep", 1) > 1:
        a += ["--ep", str(k["ep"])]
    if k.get("experts"):
        a += ["--experts", str(k["experts"])]
    if k.get("deepseek"):
        dim = int(MODEL[MODEL.index("--dim") + 1])
        a += ["--experts", "8", "--topk", "2", "--expert-ffn-dim", str(dim // 2),
              "--shared-experts", "1", "--first-dense-layers", "1", "--router", "sigmoid"]
    if k.get("parts", 1) > 1:
        a += ["--moe-overlap-parts", str(k["parts"])]
    if k.get("cp", 1) > 1:
        a += ["--cp", str(k["cp"]), "--cp-comm", k.get("cp_comm", "ring")]
    if k.get("arch") == "llama":
        heads = int(MODEL[MODEL.index("--heads") + 1])
        a += ["--arch", "llama", "--kv-heads", str(heads // 2), "--tie-embeddings=false"]
    if k["pp"] > 1 or plan:
        a += ["--schedule", k.get("schedule", "1f1b"), "--virtual-stages", str(k.get("v", 1))]
    a += ["--precision", k.get("precision", "fp32")]
    if plan:
        a += ["--micro-batch", str(k["mb"]), "--ep", str(k.get("ep", 1)),
              "--sequence-parallel=" + ("true" if k.get("sp") else "false")]
    else:
        a += ["--microbatches", str(batch() // (k["dp"] * k["mb"]))]
        if k.get("sp"):
            a += ["--sequence-parallel"]
    return a

