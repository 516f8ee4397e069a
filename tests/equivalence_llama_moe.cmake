# The DeepSeek-V3 MoE layer on the llama block (docs/moe.md, "The llama MoE") in every layout
# against one worker at the same aux/capacity groups (one worker with --microbatches G against
# dp x microbatches = G): data parallelism with ZeRO 0-3, expert parallelism (with dp, with
# ZeRO 3), tensor parallelism (the token split, with and without sequence parallelism),
# pipeline stages, recomputation, bf16; and the refusals these replace (--tp with experts, ep
# with ZeRO 3, --recompute full with experts), for gpt2's MoE too. The base has every part of
# the layer at once: a dense first layer, a shared expert, fine-grained experts (Fe 32 < F 96),
# the sigmoid router with its routed scale and bias update, capacity drops, and an aux
# coefficient large enough that a doubled or missing aux gradient moves the losses.
if(NOT DEFINED MT_EQUIV OR NOT DEFINED MT_MPIRUN)
  message(FATAL_ERROR "equivalence_llama_moe.cmake needs equivalence.cmake's and comm_mpi.cmake's variables")
endif()
set(MT_LLAMA_MOE_MODEL "--arch llama --layers 3 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq 32 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5 --experts 4 --topk 2 --expert-ffn-dim 32 --shared-experts 1 --first-dense-layers 1 --capacity-factor 1.25 --aux-loss-coef 0.1")
set(MT_LLAMA_MOE "${MT_LLAMA_MOE_MODEL} --router sigmoid --routed-scale 2 --router-bias-update 0.01")
add_test(NAME equivalence.llama_moe_layouts
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_LLAMA_MOE} --repeat
                 --reference "--microbatches 2"
                 --layout "--dp 2 --zero 3" --layout "--dp 2 --ep 2"
                 --layout "--dp 2 --ep 2 --zero 3" --layout "--tp 2 --microbatches 2"
                 --layout "--tp 2 --sequence-parallel --microbatches 2"
                 --layout "--dp 2 --ep 2 --tp 2 --sequence-parallel --zero 3"
                 --layout "--pp 3 --microbatches 2 --schedule zb-h1"
                 --layout "--pp 3 --dp 2 --ep 2 --zero 3")
# The softmax router, dropless, over 4 groups: ep 2 inside dp 4, ep 4, ZeRO 2.
add_test(NAME equivalence.llama_moe_softmax_ep
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "${MT_LLAMA_MOE_MODEL} --capacity-factor 0" --reference "--microbatches 4"
                 --layout "--dp 4 --ep 2 --zero 2" --layout "--dp 4 --ep 4 --zero 3"
                 --layout "--dp 2 --tp 2 --ep 2 --microbatches 2")
# --recompute full re-runs each MoE block's forward in its backward: bit for bit the losses
# and weights (a second aux gradient or a second bias-update count would change both), and
# the routing metrics (expert load, aux loss, drops) of each step counted once.
add_test(NAME equivalence.llama_moe_recompute
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_LLAMA_MOE} ${MT_EQUIV_EXACT}
                 --reference "--dp 2 --ep 2"
                 --layout "--dp 2 --ep 2 --recompute full"
                 --layout "--dp 2 --ep 2 --recompute selective")
add_test(NAME equivalence.llama_moe_recompute_metrics
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/equivalence/moe_metrics_compare.py
                 --bin ${MT_EQUIV_BIN} --base ${MT_LLAMA_MOE} --reference "--microbatches 2"
                 --blocks 2 --layout "--microbatches 2 --recompute full"
                 --layout "--dp 2 --ep 2 --pp 3 --recompute full"
                 --layout "--tp 2 --microbatches 2 --recompute full")
# bf16 layouts against bf16 one worker (the llama bf16 tolerances). Without the bias update:
# its sign steps turn a bf16 near-tie between two experts' loads into a whole step of bias.
add_test(NAME equivalence.llama_moe_bf16
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "${MT_LLAMA_MOE_MODEL} --router sigmoid --routed-scale 2 --precision bf16"
                 --loss-rtol 2e-3 --weight-rtol 2e-2 --reference "--microbatches 2"
                 --layout "--dp 2 --ep 2 --zero 3" --layout "--tp 2 --sequence-parallel --microbatches 2"
                 --layout "--pp 3 --microbatches 2 --schedule zb-h1"
                 --layout "--microbatches 2 --recompute full")
# gpt2's MoE (section 1) under what used to be refused: tp, ep with ZeRO 3, --recompute full.
add_test(NAME equivalence.moe_tp_zero3_recompute
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "${MT_EQUIV_BASE} --experts 4 --topk 2 --capacity-factor 1.25 --steps 6"
                 --reference "--microbatches 2"
                 --layout "--tp 2 --microbatches 2" --layout "--dp 2 --ep 2 --zero 3"
                 --layout "--dp 2 --tp 2 --sequence-parallel --ep 2 --zero 3"
                 --layout "--microbatches 2 --recompute full")
set_tests_properties(equivalence.llama_moe_layouts equivalence.llama_moe_softmax_ep
                     equivalence.llama_moe_recompute equivalence.llama_moe_recompute_metrics
                     equivalence.llama_moe_bf16 equivalence.moe_tp_zero3_recompute
                     PROPERTIES LABELS "equivalence;moe;llama" TIMEOUT 600)
# MPI processes: ep with ZeRO 3 and the tp token split across processes.
add_test(NAME equivalence.llama_moe_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_LLAMA_MOE}
                 --reference "--microbatches 2" --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --dp 2 --ep 2 --zero 3"
                 --layout "--backend mpi --tp 2 --sequence-parallel --microbatches 2")
set_tests_properties(equivalence.llama_moe_mpi_np2 PROPERTIES LABELS "mpi;moe;llama" TIMEOUT 600)
# --export-hf of a llama MoE model (§9a): a meshtrain_moe config.json with DeepseekV3Config's
# MoE keys, the selection biases in model.safetensors, and --init-from DIR continuing exactly
# as --init-from of the same run's --export file.
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/llama_moe_hf_check.py [=[
import json, os, struct, subprocess, sys, tempfile
bin_, flags = sys.argv[1], sys.argv[2].split()
i = flags.index("--steps")
del flags[i:i + 2]  # each run gives its own
def train(extra, d, name):
    m = os.path.join(d, name + ".jsonl")
    subprocess.run([bin_, "train"] + flags + extra + ["--metrics", m, "--quiet"], check=True)
    return [r["loss"] for r in map(json.loads, open(m)) if "loss" in r]
with tempfile.TemporaryDirectory() as d:
    hf, st = os.path.join(d, "hf"), os.path.join(d, "w.safetensors")
    train(["--steps", "3", "--export", st, "--export-hf", hf], d, "a")
    cfg = json.load(open(os.path.join(hf, "config.json")))
    want = {"model_type": "meshtrain_moe", "architectures": ["MeshtrainMoeForCausalLM"],
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "n_shared_experts": 1, "first_k_dense_replace": 1, "routed_scaling_factor": 2.0,
            "scoring_func": "sigmoid", "norm_topk_prob": True, "moe_layer_freq": 1}
    bad = {k: cfg.get(k) for k, v in want.items() if cfg.get(k) != v}
    assert not bad, bad
    with open(os.path.join(hf, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    for i in (1, 2):
        assert f"model.layers.{i}.mlp.gate.e_score_correction_bias" in header, sorted(header)
    from_dir = train(["--steps", "4", "--init-from", hf], d, "b")
    from_file = train(["--steps", "4", "--init-from", st], d, "c")
    assert from_dir == from_file, (from_dir, from_file)
print("OK")
]=])
add_test(NAME cli.llama_moe_export_hf
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_BINARY_DIR}/llama_moe_hf_check.py ${MT_EQUIV_BIN}
                 "${MT_LLAMA_MOE}")
set_tests_properties(cli.llama_moe_export_hf PROPERTIES LABELS "binary;moe;llama" TIMEOUT 300)
