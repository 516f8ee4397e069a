# Layout equivalence (tests/equivalence/equivalence.py): the binary under data-parallel
# layouts against one worker at the same global batch. The fast default covers every ZeRO
# stage, dp 2 and 4, microbatches 1 and 2, clipping, uneven shards, MPI, resume and memory;
# MESHTRAIN_FULL_TESTS=1 adds the full matrices (dp x zero x microbatches, tp, pp, moe).
# numpy is all the harness needs; Debian's interpreter has it.
set(MT_EQUIV /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/equivalence/equivalence.py)
set(MT_EQUIV_BIN $<TARGET_FILE:meshtrain>)
# 2 layers, dim 64, seq 32: about a second per run. A clip of 0.5 is active at every step.
set(MT_EQUIV_BASE "--layers 2 --dim 64 --heads 4 --seq 32 --batch 8 --steps 10 --lr-schedule constant --grad-clip 0.5")
# Uneven: vocab 257 (wte 10280 floats) and dim 40 make units that dp 4 does not divide.
set(MT_EQUIV_UNEVEN "--layers 1 --dim 40 --heads 4 --seq 16 --vocab 257 --batch 12 --steps 10 --lr-schedule constant --grad-clip 0.05")

add_test(NAME equivalence.dp_zero_fast
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE} --repeat
                 --layout "--dp 2 --zero 0" --layout "--dp 2 --zero 1 --microbatches 2"
                 --layout "--dp 4 --zero 2" --layout "--dp 4 --zero 3 --microbatches 2"
                 --layout "--dp 2 --zero 3 --bucket-mb 0.05")
add_test(NAME equivalence.dp_uneven_shards
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_UNEVEN}
                 --layout "--dp 4 --zero 1" --layout "--dp 2 --zero 2 --microbatches 2"
                 --layout "--dp 4 --zero 3" --layout "--dp 3 --zero 3 --microbatches 2")
add_test(NAME equivalence.dp_resume_across_layouts
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE}
                 --pair "--dp 4 --zero 3|" --pair "|--dp 4 --zero 3"
                 --pair "--dp 2 --zero 1 --microbatches 2|--dp 4 --zero 2")
# ZeRO 1-2 ownership follows the buckets (stop 47: a chunk's blocks in at most quarter
# buckets): 8 blocks make 4 buckets of 2 at the default --bucket-mb and 8 of 1 at 0.001, so
# the ranks own other elements. A sharded checkpoint saved under one loads under the other
# (and at one worker) with the reference's losses and weights.
add_test(NAME equivalence.dp_zero_bucket_reshard
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --save-at 3
                 --base "--layers 8 --dim 32 --heads 4 --seq 16 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5"
                 --pair "--dp 2 --zero 1|--dp 2 --zero 1 --bucket-mb 0.001"
                 --pair "--dp 2 --zero 2 --bucket-mb 0.001|--dp 2 --zero 1"
                 --pair "--dp 2 --zero 1|")
set_tests_properties(equivalence.dp_zero_bucket_reshard PROPERTIES LABELS "equivalence;checkpoint"
                     TIMEOUT 300)
add_test(NAME equivalence.dp_memory_formulas
         COMMAND ${MT_EQUIV} memory --bin ${MT_EQUIV_BIN}
                 --base "--layers 4 --dim 128 --heads 4 --seq 32 --batch 8 --steps 1 --bucket-mb 0.3"
                 --layout "--dp 4 --zero 0" --layout "--dp 4 --zero 1" --layout "--dp 4 --zero 2"
                 --layout "--dp 4 --zero 3" --layout "--dp 2 --zero 3")
set_tests_properties(equivalence.dp_zero_fast equivalence.dp_uneven_shards
                     equivalence.dp_resume_across_layouts equivalence.dp_memory_formulas
                     PROPERTIES LABELS equivalence TIMEOUT 300)

# The same binary as MPI processes: one rank per process, world size from mpirun.
set(MT_EQUIV_MPIRUN "${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none")
add_test(NAME equivalence.dp_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE}
                 --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --dp 2 --zero 0 --bucket-mb 0.05"
                 --layout "--backend mpi --dp 2 --zero 2 --microbatches 2")
add_test(NAME equivalence.dp_mpi_np4
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE}
                 --launcher "${MT_EQUIV_MPIRUN} -np 4 {bin}"
                 --layout "--backend mpi --dp 4 --zero 3" --layout "--backend mpi --dp 4 --zero 1")
set_tests_properties(equivalence.dp_mpi_np2 equivalence.dp_mpi_np4
                     PROPERTIES LABELS mpi TIMEOUT 300)

# --recompute selective|full against none in the same layout: bitwise (tolerances 0) losses
# and exported weights (docs/recomputation.md). The gtest (tests/train/test_recompute.cpp)
# covers more layouts in-process; these drive the binary, the flag and MPI.
set(MT_EQUIV_EXACT --loss-rtol 0 --weight-rtol 0)
add_test(NAME equivalence.recompute_tp_sp
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE} ${MT_EQUIV_EXACT}
                 --reference "--tp 2 --sequence-parallel"
                 --layout "--tp 2 --sequence-parallel --recompute selective"
                 --layout "--tp 2 --sequence-parallel --recompute full")
add_test(NAME equivalence.recompute_pp_zb_h1_zero3
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE} ${MT_EQUIV_EXACT}
                 --reference "--pp 2 --schedule zb-h1 --microbatches 4 --dp 2 --zero 3"
                 --layout "--pp 2 --schedule zb-h1 --microbatches 4 --dp 2 --zero 3 --recompute selective"
                 --layout "--pp 2 --schedule zb-h1 --microbatches 4 --dp 2 --zero 3 --recompute full")
add_test(NAME equivalence.recompute_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE} ${MT_EQUIV_EXACT}
                 --reference "--dp 2 --zero 3" --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --dp 2 --zero 3 --recompute full"
                 --layout "--backend mpi --dp 2 --zero 3 --recompute selective")
set_tests_properties(equivalence.recompute_tp_sp equivalence.recompute_pp_zb_h1_zero3
                     PROPERTIES LABELS equivalence TIMEOUT 300)
set_tests_properties(equivalence.recompute_mpi_np2 PROPERTIES LABELS mpi TIMEOUT 300)

if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  set(full_layouts)
  foreach(dp 2 4)
    foreach(zero 0 1 2 3)
      foreach(mb 1 2)
        list(APPEND full_layouts --layout "--dp ${dp} --zero ${zero} --microbatches ${mb}")
      endforeach()
    endforeach()
  endforeach()
  add_test(NAME equivalence.dp_full_matrix
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE} ${full_layouts})
  set_tests_properties(equivalence.dp_full_matrix PROPERTIES LABELS full TIMEOUT 900)
endif()

# Tensor parallelism (docs/tensor_parallel.md) against one worker: tp 2 and 4, with and
# without sequence parallelism, a vocabulary tp divides (256) and one it does not (257:
# padded internally, never in a file), dp x tp meshes with ZeRO, resharding checkpoints
# (saved under tp 4, loaded under tp 1 and 2) and a subset as MPI processes.
add_test(NAME equivalence.tp_fast
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE} --repeat
                 --layout "--tp 2" --layout "--tp 4" --layout "--tp 2 --sequence-parallel"
                 --layout "--tp 4 --sequence-parallel" --layout "--dp 2 --tp 2 --zero 1")
add_test(NAME equivalence.tp_uneven_vocab
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_UNEVEN}
                 --layout "--tp 2" --layout "--tp 4 --sequence-parallel"
                 --layout "--dp 2 --tp 2 --zero 1 --sequence-parallel"
                 --layout "--dp 2 --tp 2 --zero 3 --microbatches 2")
add_test(NAME equivalence.tp_resume_resharding
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_UNEVEN}
                 --pair "--tp 4|" --pair "--tp 4|--tp 2 --sequence-parallel"
                 --pair "--dp 2 --tp 2 --zero 1|--tp 4 --zero 2")
set_tests_properties(equivalence.tp_fast equivalence.tp_uneven_vocab
                     equivalence.tp_resume_resharding
                     PROPERTIES LABELS "equivalence;tp" TIMEOUT 300)
add_test(NAME equivalence.tp_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_UNEVEN}
                 --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --tp 2" --layout "--backend mpi --tp 2 --sequence-parallel")
add_test(NAME equivalence.tp_mpi_np4
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE}
                 --launcher "${MT_EQUIV_MPIRUN} -np 4 {bin}"
                 --layout "--backend mpi --dp 2 --tp 2 --zero 1 --sequence-parallel")
set_tests_properties(equivalence.tp_mpi_np2 equivalence.tp_mpi_np4
                     PROPERTIES LABELS "mpi;tp" TIMEOUT 300)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  set(tp_layouts)
  foreach(tp 2 4)
    foreach(sp "" "--sequence-parallel")
      foreach(zero 0 1 2 3)
        list(APPEND tp_layouts --layout "--dp 2 --tp ${tp} ${sp} --zero ${zero}")
      endforeach()
    endforeach()
  endforeach()
  add_test(NAME equivalence.tp_full_matrix
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_UNEVEN} ${tp_layouts})
  set_tests_properties(equivalence.tp_full_matrix PROPERTIES LABELS "full;tp" TIMEOUT 900)
endif()

# Pipeline parallelism: per-step losses and exported weights (gathered from the stages to
# rank 0) against one worker.
# pp {2,4} x every schedule (interleaved: 2 virtual stages) x microbatches {pp, 2pp}, uneven
# --stage-layers, and pp composed with dp (ZeRO 0-3, zb-h1 and interleaved under dp 2) and
# tp (the 3-D mesh). About 30 runs of a second each.
set(MT_PP_LAYOUTS)
foreach(pp 2 4)
  math(EXPR pp2 "2 * ${pp}")
  foreach(mb ${pp} ${pp2})
    foreach(sched gpipe 1f1b zb-h1)
      list(APPEND MT_PP_LAYOUTS --layout "--pp ${pp} --microbatches ${mb} --schedule ${sched}")
    endforeach()
    list(APPEND MT_PP_LAYOUTS
         --layout "--pp ${pp} --microbatches ${mb} --schedule interleaved --virtual-stages 2")
  endforeach()
endforeach()
add_test(NAME equivalence.pp_schedules
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --repeat
                 --base "--layers 4 --dim 64 --heads 4 --seq 32 --batch 8 --steps 10 --lr-schedule constant --grad-clip 0.5"
                 ${MT_PP_LAYOUTS}
                 --layout "--pp 4 --microbatches 8 --schedule gpipe --stage-layers 2,1,1,0"
                 --layout "--pp 2 --microbatches 4 --schedule interleaved --virtual-stages 2 --stage-layers 2,1,0,1"
                 --layout "--dp 2 --pp 2 --microbatches 2 --schedule 1f1b"
                 --layout "--dp 2 --pp 2 --microbatches 2 --schedule 1f1b --zero 1"
                 --layout "--dp 2 --pp 2 --microbatches 4 --schedule gpipe --zero 2"
                 --layout "--dp 2 --pp 2 --microbatches 2 --schedule 1f1b --zero 3"
                 --layout "--dp 2 --pp 4 --microbatches 4 --schedule 1f1b --zero 1"
                 --layout "--dp 2 --pp 2 --microbatches 4 --schedule zb-h1"
                 --layout "--dp 2 --pp 2 --microbatches 4 --schedule zb-h1 --zero 2"
                 --layout "--dp 2 --pp 2 --microbatches 2 --schedule interleaved --virtual-stages 2"
                 --layout "--dp 2 --pp 2 --microbatches 4 --schedule interleaved --virtual-stages 2 --zero 1"
                 --layout "--dp 2 --pp 2 --microbatches 2 --schedule interleaved --virtual-stages 2 --zero 2"
                 --layout "--dp 2 --pp 2 --microbatches 4 --schedule interleaved --virtual-stages 2 --zero 3"
                 --layout "--dp 2 --pp 2 --tp 2 --microbatches 2 --schedule 1f1b"
                 --layout "--dp 2 --pp 2 --tp 2 --microbatches 2 --schedule 1f1b --zero 1")
add_test(NAME equivalence.pp_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "--layers 2 --dim 64 --heads 4 --seq 32 --batch 8 --steps 10 --lr-schedule constant --eval-every 5 --eval-batches 1"
                 --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --pp 2 --microbatches 4 --schedule 1f1b"
                 --layout "--backend mpi --pp 2 --microbatches 4 --schedule zb-h1")
# The global view under pp: checkpoints saved under pp resume under one worker and other
# meshes (and the reverse); --eval-every reports one worker's val_loss (a forward-only pass
# through the stages) and the final sample is one worker's, text for text.
add_test(NAME equivalence.pp_resume
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE}
                 --pair "--pp 2 --microbatches 2 --schedule 1f1b|"
                 --pair "|--pp 2 --microbatches 4 --schedule zb-h1"
                 --pair "--dp 2 --pp 2 --tp 2 --microbatches 2|--pp 4 --microbatches 4 --schedule gpipe")
add_test(NAME equivalence.pp_eval_sample
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --sample 32
                 --base "--layers 4 --dim 64 --heads 4 --seq 32 --batch 8 --steps 4 --lr-schedule constant --eval-every 2 --eval-batches 2"
                 --layout "--pp 2 --microbatches 2"
                 --layout "--pp 2 --microbatches 4 --schedule interleaved --virtual-stages 2"
                 --layout "--dp 2 --pp 2 --tp 2 --sequence-parallel --microbatches 2")
set_tests_properties(equivalence.pp_schedules equivalence.pp_resume equivalence.pp_eval_sample
                     PROPERTIES LABELS "equivalence;pp" TIMEOUT 300)
set_tests_properties(equivalence.pp_mpi_np2 PROPERTIES LABELS "mpi;pp" TIMEOUT 300)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  # pp {2,4} x every schedule x microbatches {pp, 2pp} x ZeRO 0-3 at dp 2 (interleaved v 2).
  set(pp_layouts)
  foreach(pp 2 4)
    math(EXPR pp2 "2 * ${pp}")
    foreach(sched gpipe 1f1b zb-h1 interleaved)
      set(v "")
      if(sched STREQUAL "interleaved")
        set(v "--virtual-stages 2")
      endif()
      foreach(mb ${pp} ${pp2})
        foreach(zero 0 1 2 3)
          list(APPEND pp_layouts --layout
               "--dp 2 --pp ${pp} --schedule ${sched} ${v} --microbatches ${mb} --zero ${zero}")
        endforeach()
      endforeach()
    endforeach()
  endforeach()
  add_test(NAME equivalence.pp_full_matrix
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                   --base "--layers 8 --dim 64 --heads 4 --seq 32 --batch 16 --steps 6 --lr-schedule constant --grad-clip 0.5"
                   ${pp_layouts})
  set_tests_properties(equivalence.pp_full_matrix PROPERTIES LABELS "full;pp" TIMEOUT 1800)
endif()

# Mixture of experts (docs/moe.md). The aux loss and the capacity are per group (one
# microbatch on one dp rank), so a reference must split the batch into the same groups:
# one worker with --microbatches G against dp x microbatches = G. Dropless and with
# capacity dropping; ZeRO stages; a checkpoint saved under one layout resumed under another.
set(MT_EQUIV_MOE "${MT_EQUIV_BASE} --experts 4 --topk 2")
add_test(NAME equivalence.moe_dp_dropless
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_MOE} --repeat
                 --reference "--microbatches 2"
                 --layout "--dp 2 --zero 0" --layout "--dp 2 --zero 3")
add_test(NAME equivalence.moe_dp_capacity
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "${MT_EQUIV_MOE} --capacity-factor 1.25 --moe-every 2"
                 --reference "--microbatches 4"
                 --layout "--dp 4 --zero 1" --layout "--dp 2 --zero 2 --microbatches 2")
add_test(NAME equivalence.moe_resume
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_MOE}
                 --reference "--microbatches 2" --pair "--dp 2 --zero 1|--microbatches 2")
# Expert parallelism (ZeRO 0-2; exports gather the experts from their owners to rank 0).
# dp 4 x ep 2 exercises the ep_replica reduction;
# under ZeRO 1-2 the experts must also survive the parameter all-gather over dp.
add_test(NAME equivalence.moe_ep
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --repeat
                 --base "${MT_EQUIV_MOE} --capacity-factor 1.25"
                 --reference "--microbatches 4"
                 --layout "--dp 4 --ep 4" --layout "--dp 4 --ep 2"
                 --layout "--dp 2 --ep 2 --microbatches 2"
                 --layout "--dp 2 --ep 2 --zero 1 --microbatches 2" --layout "--dp 4 --ep 2 --zero 1"
                 --layout "--dp 4 --ep 2 --zero 2" --layout "--dp 4 --ep 4 --zero 2")
add_test(NAME equivalence.moe_ep_dropless
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base ${MT_EQUIV_MOE} --reference "--microbatches 2" --layout "--dp 2 --ep 2")
add_test(NAME equivalence.moe_ep_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_MOE}
                 --reference "--microbatches 2" --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --dp 2 --ep 2")
# Checkpoints across ep layouts (both directions, two MoE groups each), the router biases
# of --router-bias-update through a save/load (they steer expert selection: a resume
# without them diverges), and --init-from under ep and pp: every layout starts from the
# weights of 3 one-worker steps and must continue as one worker does, down to the final
# sample (drawn on rank 0 from the gathered model, router biases included).
add_test(NAME equivalence.moe_ep_resume
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_MOE}
                 --reference "--microbatches 2"
                 --pair "--dp 2 --ep 2|--microbatches 2" --pair "--microbatches 2|--dp 2 --ep 2")
add_test(NAME equivalence.moe_router_bias_resume
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN}
                 --base "${MT_EQUIV_MOE} --router-bias-update 0.01" --reference "--microbatches 2"
                 --pair "--dp 2 --ep 2|--microbatches 2" --pair "--microbatches 2|--microbatches 2"
                 --pair "--pp 2 --dp 2 --ep 2|--microbatches 2")
add_test(NAME equivalence.moe_init_from
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --init-steps 3 --sample 32
                 --base "${MT_EQUIV_MOE} --router-bias-update 0.01" --reference "--microbatches 2"
                 --layout "--dp 2 --ep 2" --layout "--pp 2 --microbatches 2")
# ZeRO 1-2 under ep split the blocks into buckets of whole blocks per rank (stop 48: 8 MoE
# blocks make 4 buckets of 2 at dp 2, 2 of 4 at dp 4; 8 of 1 at --bucket-mb 0.001; the moe_ep
# model's 2 blocks stay one bucket). Against one worker, and sharded checkpoints saved under
# one ownership load under another (and at one worker) with the reference's losses and weights.
set(MT_EQUIV_MOE_8 "--layers 8 --dim 32 --heads 4 --seq 16 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5 --experts 4 --topk 2 --capacity-factor 1.25")
add_test(NAME equivalence.moe_ep_zero_buckets
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_MOE_8}
                 --reference "--microbatches 4"
                 --layout "--dp 2 --ep 2 --zero 1 --microbatches 2"
                 --layout "--dp 2 --ep 2 --zero 2 --microbatches 2" --layout "--dp 4 --ep 2 --zero 1")
add_test(NAME equivalence.moe_ep_zero_bucket_reshard
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --save-at 3 --base ${MT_EQUIV_MOE_8}
                 --reference "--microbatches 2"
                 --pair "--dp 2 --ep 2 --zero 1|--dp 2 --ep 2 --zero 1 --bucket-mb 0.001"
                 --pair "--dp 2 --ep 2 --zero 2 --bucket-mb 0.001|--dp 2 --ep 2 --zero 1"
                 --pair "--dp 2 --ep 2 --zero 1|--microbatches 2")
set_tests_properties(equivalence.moe_ep_zero_buckets PROPERTIES LABELS "equivalence;moe"
                     TIMEOUT 300)
set_tests_properties(equivalence.moe_ep_zero_bucket_reshard PROPERTIES
                     LABELS "equivalence;checkpoint;moe" TIMEOUT 300)
set_tests_properties(equivalence.moe_ep equivalence.moe_ep_dropless equivalence.moe_ep_resume
                     equivalence.moe_router_bias_resume equivalence.moe_init_from
                     PROPERTIES LABELS "equivalence;moe" TIMEOUT 300)
set_tests_properties(equivalence.moe_ep_mpi_np2 PROPERTIES LABELS "mpi;moe" TIMEOUT 300)
# Metrics sanity: every step reports aux_loss > 0 and, per MoE layer, expert_load summing
# to tokens x k minus the drops that dropped_frac reports (capacity 1: some are dropped).
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/moe_metrics_check.py [=[
import json, subprocess, sys, tempfile, os
bin_ = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    m = os.path.join(d, "m.jsonl")
    subprocess.run([bin_, "train", "--layers", "2", "--dim", "32", "--heads", "2", "--seq", "16",
                    "--batch", "8", "--steps", "3", "--experts", "4", "--topk", "2", "--dp", "2",
                    "--capacity-factor", "1", "--metrics", m, "--quiet"], check=True)
    recs = [json.loads(l) for l in open(m) if '"loss"' in l]
assert len(recs) == 3, recs
routed = 8 * 16 * 2  # tokens x k per layer
for r in recs:
    assert r["aux_loss"] > 0, r
    loads = r["expert_load"]
    assert len(loads) == 2 and all(len(l) == 4 for l in loads), loads
    kept = sum(sum(l) for l in loads)
    assert 0 < r["dropped_frac"] < 1, r
    assert kept == round(2 * routed * (1 - r["dropped_frac"])), (kept, r["dropped_frac"])
    assert all(sum(l) <= routed for l in loads), loads
print("OK")
]=])
add_test(NAME equivalence.moe_metrics
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_BINARY_DIR}/moe_metrics_check.py ${MT_EQUIV_BIN})
set_tests_properties(equivalence.moe_dp_dropless equivalence.moe_dp_capacity
                     equivalence.moe_resume equivalence.moe_metrics
                     PROPERTIES LABELS "equivalence;moe" TIMEOUT 300)
# MoE blocks inside pipeline stages: 4 blocks over 2 (or 4) stages, capacity drops, and an
# aux coefficient large enough that a wrong aux gradient scale (it must stay 1/(dp x
# microbatches) whatever order the schedule runs the microbatches in) moves the losses
# by ~1e-4. Every schedule that runs MoE backward split (zb-h1) or fused; ep's all-to-alls
# inside a stage, zb-h1 with ep and ZeRO 1. Losses and exported weights.
set(MT_EQUIV_MOE_PP "${MT_EQUIV_BASE} --layers 4 --experts 4 --topk 2 --capacity-factor 1.25 --aux-loss-coef 0.1")
add_test(NAME equivalence.moe_pp
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --repeat
                 --base ${MT_EQUIV_MOE_PP} --reference "--microbatches 4"
                 --layout "--pp 2 --dp 2 --ep 2 --microbatches 2 --schedule 1f1b"
                 --layout "--pp 2 --dp 2 --ep 2 --microbatches 2 --schedule zb-h1 --zero 1"
                 --layout "--pp 2 --dp 2 --ep 2 --microbatches 2 --schedule gpipe"
                 --layout "--pp 2 --dp 2 --microbatches 2"
                 --layout "--pp 2 --microbatches 4 --schedule 1f1b"
                 --layout "--pp 2 --microbatches 4 --schedule gpipe"
                 --layout "--pp 2 --microbatches 4 --schedule zb-h1"
                 --layout "--pp 4 --microbatches 4 --schedule zb-h1")
# The stages' routing metrics gathered to rank 0: every MoE block, in order, as one worker.
add_test(NAME equivalence.moe_pp_metrics
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/equivalence/moe_metrics_compare.py
                 --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_MOE_PP} --reference "--microbatches 4"
                 --blocks 4 --layout "--pp 2 --dp 2 --ep 2 --microbatches 2"
                 --layout "--pp 2 --microbatches 4 --schedule zb-h1"
                 --layout "--pp 4 --microbatches 4 --moe-every 1")
add_test(NAME equivalence.moe_pp_mpi_np4
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base ${MT_EQUIV_MOE_PP} --reference "--microbatches 4"
                 --launcher "${MT_EQUIV_MPIRUN} -np 4 {bin}"
                 --layout "--backend mpi --pp 2 --dp 2 --ep 2 --microbatches 2")
set_tests_properties(equivalence.moe_pp equivalence.moe_pp_metrics
                     PROPERTIES LABELS "equivalence;moe;pp" TIMEOUT 300)
set_tests_properties(equivalence.moe_pp_mpi_np4
                     PROPERTIES LABELS "mpi;moe;pp" TIMEOUT 300)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  # ep {2,4} x ZeRO 0-2 without pp, and pp 2 x dp 2 x ep 2 x every schedule x ZeRO 0-2,
  # dropless and with capacity drops; reference: one worker with the same 4 groups.
  foreach(cap 0 1.25)
    set(moe_layouts)
    foreach(zero 0 1 2)
      foreach(ep 2 4)
        list(APPEND moe_layouts --layout "--dp 4 --ep ${ep} --zero ${zero}")
      endforeach()
      foreach(sched gpipe 1f1b zb-h1 interleaved)
        set(v "")
        if(sched STREQUAL "interleaved")
          set(v "--virtual-stages 2")
        endif()
        list(APPEND moe_layouts --layout
             "--pp 2 --dp 2 --ep 2 --microbatches 2 --schedule ${sched} ${v} --zero ${zero}")
      endforeach()
    endforeach()
    add_test(NAME equivalence.moe_full_matrix_cap${cap}
             COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                     --base "${MT_EQUIV_MOE_PP} --capacity-factor ${cap}" --reference "--microbatches 4"
                     ${moe_layouts})
    set_tests_properties(equivalence.moe_full_matrix_cap${cap}
                         PROPERTIES LABELS "full;moe" TIMEOUT 1800)
  endforeach()
endif()

# Random layouts against one worker (tests/equivalence_random.py): 100 draws of model,
# precision and layout knobs, each compared step by step with one worker.
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME equivalence.random_layouts
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/equivalence_random.py
                   $<TARGET_FILE:meshtrain> ${CMAKE_CURRENT_BINARY_DIR}/equivalence_random 2026 100)
  set_tests_properties(equivalence.random_layouts PROPERTIES TIMEOUT 3000 LABELS full)
endif()
