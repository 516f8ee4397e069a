# Context parallelism (--cp, docs/contracts.md §11, docs/context_parallel.md) against one worker:
# per-step losses and gradient norms, and the exported weights after 10 steps, per tensor
# (losses 1e-5 relative, gradient norms and weights 1e-4), so a wrong gradient of any
# parameter shows. The default suite runs the ring at cp 2, the all-gather at cp 4 and cp with dp,
# ZeRO 3 and tp with sequence parallelism; MESHTRAIN_FULL_TESTS=1 adds the matrix.
if(NOT DEFINED MT_EQUIV)
  message(FATAL_ERROR "equivalence_context_parallel.cmake needs equivalence.cmake's variables")
endif()
set(MT_CP_LLAMA "--arch llama --layers 2 --dim 64 --heads 8 --kv-heads 4 --ffn-dim 96 --seq 32 --batch 8 --steps 10 --lr-schedule constant --grad-clip 0.5")
# The validation loss too: the val loader shards its sequences the same way.
add_test(NAME equivalence.llama_cp
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "${MT_CP_LLAMA} --eval-every 5 --eval-batches 1" --repeat --grad-norm-rtol 1e-4
                 --layout "--cp 2" --layout "--cp 4 --cp-comm allgather"
                 --layout "--cp 2 --dp 2 --tp 2 --zero 3 --sequence-parallel")
set_tests_properties(equivalence.llama_cp PROPERTIES LABELS "equivalence;llama;cp" TIMEOUT 600)
# --precision bf16: the ring's K/V blocks travel in bf16 (the merges stay fp32), within the
# bf16 tolerances of the other bf16 equivalence tests.
add_test(NAME equivalence.llama_cp_bf16_ring
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base "${MT_CP_LLAMA} --precision bf16"
                 --loss-rtol 2e-3 --weight-rtol 2e-2 --layout "--cp 2")
set_tests_properties(equivalence.llama_cp_bf16_ring PROPERTIES LABELS "equivalence;llama;cp"
                     TIMEOUT 600)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  set(cp_layouts)
  foreach(comm ring allgather)
    list(APPEND cp_layouts --layout "--cp 4 --cp-comm ${comm}")
    foreach(zero 0 1 2 3)
      list(APPEND cp_layouts --layout "--cp 2 --dp 2 --zero ${zero} --microbatches 2 --cp-comm ${comm}")
    endforeach()
    list(APPEND cp_layouts --layout "--cp 2 --tp 2 --cp-comm ${comm}"
                           --layout "--cp 2 --tp 4 --sequence-parallel --cp-comm ${comm}"
                           --layout "--cp 2 --recompute full --cp-comm ${comm}")
  endforeach()
  add_test(NAME equivalence.llama_cp_full_matrix
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_LLAMA} --grad-norm-rtol 1e-4
                   ${cp_layouts})
  add_test(NAME equivalence.llama_cp_bf16
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base "${MT_CP_LLAMA} --precision bf16"
                   --loss-rtol 2e-3 --weight-rtol 2e-2
                   --layout "--cp 2" --layout "--cp 4 --dp 2 --zero 3 --cp-comm allgather")
  # An odd ring (cp 3: seq divisible by 6), ring and all-gather.
  add_test(NAME equivalence.llama_cp3
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                   --base "--arch llama --layers 2 --dim 64 --heads 8 --kv-heads 4 --ffn-dim 96 --seq 48 --batch 4 --steps 6 --lr-schedule constant --grad-clip 0.5"
                   --layout "--cp 3" --layout "--cp 3 --cp-comm allgather --tp 2")
  # Global checkpoints hold the model of every layout: saved under cp, resumed without, and
  # the reverse.
  add_test(NAME equivalence.llama_cp_resume
           COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_CP_LLAMA} --save-at 4
                   --pair "--cp 2 --dp 2 --zero 3|" --pair "|--cp 4 --cp-comm allgather")
  set_tests_properties(equivalence.llama_cp_full_matrix equivalence.llama_cp_bf16
                       equivalence.llama_cp3 equivalence.llama_cp_resume
                       PROPERTIES LABELS "full;cp" TIMEOUT 1800)
endif()

# The gpt2 block: its attention through the same ring (flash kernel, no RoPE) and its learned
# position table read at the zigzag rows' true positions. One worker runs the (T, T) kernel, so
# the rows of the key bias (exact gradient zero: softmax ignores a shift shared by every key)
# carry different rounding noise that Adam scales to full steps: --drop-rows leaves them out
# of the weight comparison (every other tensor, the rest of c_attn.bias included, is compared).
set(MT_CP_GPT2 "--layers 2 --dim 64 --heads 4 --seq 32 --batch 8 --steps 10 --lr-schedule constant --grad-clip 0.5")
set(MT_CP_GPT2_KEY_BIAS --drop-rows transformer.h.0.attn.c_attn.bias:64:64
                        --drop-rows transformer.h.1.attn.c_attn.bias:64:64)
add_test(NAME equivalence.gpt2_cp
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_GPT2} --grad-norm-rtol 1e-4
                 ${MT_CP_GPT2_KEY_BIAS}
                 --layout "--cp 2" --layout "--cp 4 --cp-comm allgather"
                 --layout "--cp 2 --dp 2 --tp 2 --zero 3 --sequence-parallel")
set_tests_properties(equivalence.gpt2_cp PROPERTIES LABELS "equivalence;cp" TIMEOUT 600)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME equivalence.gpt2_cp_full_matrix
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_GPT2} --grad-norm-rtol 1e-4
                   ${MT_CP_GPT2_KEY_BIAS}
                   --layout "--cp 2 --dp 2 --zero 1 --microbatches 2"
                   --layout "--cp 2 --recompute selective" --layout "--cp 2 --recompute full --tp 2"
                   --layout "--cp 4 --tp 2 --cp-comm allgather")
  add_test(NAME equivalence.gpt2_cp_bf16
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base "${MT_CP_GPT2} --precision bf16"
                   --loss-rtol 2e-3 --weight-rtol 2e-2 ${MT_CP_GPT2_KEY_BIAS}
                   --layout "--cp 2" --layout "--cp 4 --dp 2 --zero 3 --cp-comm allgather")
  set_tests_properties(equivalence.gpt2_cp_full_matrix equivalence.gpt2_cp_bf16
                       PROPERTIES LABELS "full;cp" TIMEOUT 1800)
endif()

# Pipeline stages under cp: each stage's microbatches are its cp rank's zigzag rows; the
# ring runs inside every stage. Default: 1F1B and DualPipe-V (two chunks per stage, each
# with its own ring), one of each arch; MESHTRAIN_FULL_TESTS=1: every schedule, both
# K/V modes.
set(MT_CP_PP_LLAMA "--arch llama --layers 4 --dim 64 --heads 8 --kv-heads 4 --ffn-dim 96 --seq 32 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5")
add_test(NAME equivalence.cp_pp
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_PP_LLAMA} --grad-norm-rtol 1e-4
                 --layout "--pp 2 --microbatches 4 --schedule 1f1b --cp 2"
                 --layout "--pp 2 --microbatches 4 --schedule dualpipev --cp 2 --tp 2 --sequence-parallel --cp-comm allgather")
set_tests_properties(equivalence.cp_pp PROPERTIES LABELS "equivalence;cp" TIMEOUT 600)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  set(cp_pp_layouts)
  foreach(comm ring allgather)
    foreach(schedule gpipe 1f1b "interleaved --virtual-stages 2" zb-h1 dualpipev)
      list(APPEND cp_pp_layouts --layout "--pp 2 --microbatches 4 --schedule ${schedule} --cp 2 --cp-comm ${comm}")
    endforeach()
  endforeach()
  list(APPEND cp_pp_layouts
       --layout "--pp 2 --microbatches 4 --schedule interleaved --virtual-stages 2 --cp 2 --dp 2 --zero 1"
       --layout "--pp 2 --microbatches 4 --schedule zb-h1 --cp 2 --recompute full")
  add_test(NAME equivalence.cp_pp_full_matrix
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_PP_LLAMA} --grad-norm-rtol 1e-4
                   ${cp_pp_layouts})
  # gpt2: the learned position table on the first stage, the tied wte shared with the last.
  add_test(NAME equivalence.gpt2_cp_pp
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                   --base "--layers 2 --dim 64 --heads 4 --seq 32 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5"
                   --grad-norm-rtol 1e-4 ${MT_CP_GPT2_KEY_BIAS}
                   --layout "--pp 2 --microbatches 4 --schedule 1f1b --cp 2"
                   --layout "--pp 2 --microbatches 4 --schedule dualpipev --cp 2 --cp-comm allgather")
  set_tests_properties(equivalence.cp_pp_full_matrix equivalence.gpt2_cp_pp
                       PROPERTIES LABELS "full;cp" TIMEOUT 1800)
endif()

# Sharded checkpoints under cp, resharded across cp sizes (equivalence.py reshard: the
# export of the step folder equals the saver's export exactly; the resumed run continues
# with the reference's losses and weights). Saved at cp 2, loaded at cp 1 and cp 4; ZeRO 0
# (every dp x cp replica holds the whole state: one of them writes it) and ZeRO 3 (split over
# dp x cp).
add_test(NAME equivalence.cp_checkpoint_reshard
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --base "${MT_CP_LLAMA} --steps 8" --save-at 4
                 --pair "--cp 2 --dp 2 --zero 0|"
                 --pair "--cp 2 --dp 2 --zero 3|--cp 4 --cp-comm allgather")
set_tests_properties(equivalence.cp_checkpoint_reshard PROPERTIES LABELS "equivalence;cp;checkpoint"
                     TIMEOUT 600)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME equivalence.cp_checkpoint_reshard_matrix
           COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --base "${MT_CP_PP_LLAMA} --steps 8"
                   --save-at 4
                   --pair "--cp 2|--cp 4" --pair "|--cp 2 --dp 2 --zero 2"
                   --pair "--cp 2 --tp 2 --sequence-parallel --zero 1 --dp 2|--pp 2 --microbatches 2 --cp 2"
                   --pair "--pp 2 --microbatches 4 --schedule dualpipev --cp 2|--cp 4 --cp-comm allgather")
  add_test(NAME equivalence.gpt2_cp_checkpoint_reshard
           COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --base "${MT_CP_GPT2} --steps 8"
                   --save-at 4 ${MT_CP_GPT2_KEY_BIAS}
                   --pair "--cp 2|" --pair "--cp 2 --dp 2 --zero 3|--cp 4")
  set_tests_properties(equivalence.cp_checkpoint_reshard_matrix
                       equivalence.gpt2_cp_checkpoint_reshard
                       PROPERTIES LABELS "full;cp;checkpoint" TIMEOUT 1800)
endif()

# A rank failing mid-ring: rank 2 of a cp 4 ring fails as step 2 starts, while the others
# wait in the ring for its K/V block; the job ends with its error line, exit 1, in bounded
# time (a hang fails as exit 124).
add_test(NAME cp_fault_mid_ring
         COMMAND ${CMAKE_SOURCE_DIR}/tests/comm_mpi/expect_exit.sh 1
                 "meshtrain: error: rank 2: injected fault at step 2" 120
                 $<TARGET_FILE:meshtrain> train --arch llama --layers 2 --dim 64 --heads 8
                 --kv-heads 4 --ffn-dim 96 --seq 32 --batch 8 --steps 3 --cp 4 --quiet)
set_tests_properties(cp_fault_mid_ring PROPERTIES LABELS "binary;cp" TIMEOUT 180
                     ENVIRONMENT MESHTRAIN_FAULT=rank:2:step:2)

# Under MPI (one rank per process): the ring's sends and receives are MPI messages.
if(DEFINED MT_EQUIV_MPIRUN)
  add_test(NAME equivalence.llama_cp_mpi
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_LLAMA}
                   --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}" --layout "--backend mpi --cp 2")
  set_tests_properties(equivalence.llama_cp_mpi PROPERTIES LABELS "mpi;cp" TIMEOUT 600)
endif()

# bench/bench_cp.py --tiny: the memory, ideal and speed tables at small sizes. Checks that the
# benchmark runs (and reads the trace's ring spans), never how fast.
add_test(NAME bench_cp_tiny
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/bench/bench_cp.py $<TARGET_FILE:meshtrain> --tiny)
set_tests_properties(bench_cp_tiny PROPERTIES LABELS "bench;cp" TIMEOUT 300)

# --dp-sync under cp: a replica is a dp index's cp ranks, whose gradients are partial sums over
# the sequence; they are all-reduced over cp at every step, local steps included, and only the
# replicas' averaging waits for the period. Against the same --dp-sync without cp: losses,
# gradient norms and weights.
add_test(NAME equivalence.cp_dp_sync
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_LLAMA} --grad-norm-rtol 1e-4
                 --reference "--dp 2 --dp-sync local:3"
                 --layout "--dp 2 --cp 2 --dp-sync local:3")
add_test(NAME equivalence.cp_dp_sync_diloco
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_LLAMA} --grad-norm-rtol 1e-4
                 --reference "--dp 2 --dp-sync diloco:4"
                 --layout "--dp 2 --cp 2 --dp-sync diloco:4 --cp-comm allgather")
set_tests_properties(equivalence.cp_dp_sync equivalence.cp_dp_sync_diloco
                     PROPERTIES LABELS "equivalence;cp" TIMEOUT 600)

# The hybrid world (--backend mpi --ranks-per-process 2 under mpirun -np 2: 2 processes x 2
# rank threads). cp 4: the ring spans both processes with two members in each (the
# hierarchical communicator's send/recv: inside a process by the local backend, across by
# MPI with the sender's slot in the tag); cp 2 x dp 2: each ring inside a process, the gradient
# replicas across; cp 2 x tp 2: each cp group has one member per process (plain MPI).
if(DEFINED MT_EQUIV_MPIRUN)
  set(MT_CP_HYB "--backend mpi --ranks-per-process 2")
  add_test(NAME equivalence.cp_hybrid
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_LLAMA} --grad-norm-rtol 1e-4
                   --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                   --layout "${MT_CP_HYB} --cp 4" --layout "${MT_CP_HYB} --cp 2 --dp 2 --zero 1")
  # cp x tp: layer 0's o_proj ends 1.07e-4 from one worker's after 10 Adam steps on the local
  # backend as well (the tp x cp sums' rounding, which Adam scales up), so 2e-4 for the weights.
  add_test(NAME equivalence.cp_hybrid_tp
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_CP_LLAMA} --grad-norm-rtol 1e-4
                   --weight-rtol 2e-4 --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                   --layout "${MT_CP_HYB} --cp 2 --tp 2 --cp-comm allgather")
  set_tests_properties(equivalence.cp_hybrid equivalence.cp_hybrid_tp
                       PROPERTIES LABELS "mpi;cp;hybrid" TIMEOUT 600)
  # A rank failing mid-ring in the hybrid world: rank 2 (process 1's first thread) fails as
  # step 2 starts while its ring peers wait for its K/V block, one inside its process and one
  # across; the job ends with its error line, exit 1, in bounded time (a hang: exit 124).
  add_test(NAME cp_hybrid_fault_mid_ring
           COMMAND ${CMAKE_SOURCE_DIR}/tests/comm_mpi/expect_exit.sh 1
                   "meshtrain: error: rank 2: injected fault at step 2" 120
                   ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none -np 2
                   $<TARGET_FILE:meshtrain> train --backend mpi --ranks-per-process 2 --arch llama --layers 2 --dim 64
                   --heads 8 --kv-heads 4 --ffn-dim 96 --seq 32 --batch 8 --steps 3 --cp 4
                   --timeout 60 --quiet)
  set_tests_properties(cp_hybrid_fault_mid_ring PROPERTIES LABELS "mpi;cp;hybrid" TIMEOUT 180
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;MESHTRAIN_FAULT=rank:2:step:2")
endif()
