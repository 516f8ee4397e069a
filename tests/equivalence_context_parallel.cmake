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
