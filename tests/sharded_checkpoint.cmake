# Sharded checkpoints (issue #13, docs/checkpoints.md): save in one layout, load in others
# (tests/equivalence/equivalence.py reshard: export --from equals the saver's export
# exactly; the resumed run continues within the equivalence tolerances, or bit-exactly in
# the same layout), on both backends, and the mpirun supervisor. The bad-input and fault
# cases are gtests (tests/cli/test_sharded_checkpoint.cpp).
if(NOT DEFINED MT_EQUIV OR NOT DEFINED MT_MPIRUN)
  message(FATAL_ERROR "sharded_checkpoint.cmake needs equivalence.cmake's and comm_mpi.cmake's variables")
endif()
# 4 layers so that pp 4 has a block per stage; saved at step 4 of 8.
set(MT_CKPT_BASE "--layers 4 --dim 64 --heads 4 --seq 32 --batch 8 --steps 8 --lr-schedule constant --grad-clip 0.5")
set(MT_CKPT_MOE "--layers 2 --dim 32 --heads 4 --seq 16 --batch 8 --steps 8 --experts 4 --topk 2 --router-bias-update 0.01 --lr-schedule constant")
add_test(NAME equivalence.checkpoint_reshard_dense
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --base ${MT_CKPT_BASE} --save-at 4
                 --pair "--dp 2 --zero 3 --tp 2 --pp 2 --microbatches 2|--dp 2 --pp 4 --microbatches 4"
                 --pair "--dp 4 --zero 3 --tp 2|--tp 4 --sequence-parallel"
                 --pair "--tp 2 --sequence-parallel|"
                 --pair "--dp 2 --zero 1 --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 4|--dp 2 --zero 2 --pp 4 --microbatches 4"
                 --pair "|--dp 4 --zero 0")
add_test(NAME equivalence.checkpoint_resume_exact
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --base ${MT_CKPT_BASE} --save-at 4
                 --loss-rtol 0 --weight-rtol 0
                 --reference "--dp 2 --zero 3 --tp 2 --pp 2 --microbatches 2"
                 --pair "--dp 2 --zero 3 --tp 2 --pp 2 --microbatches 2|--dp 2 --zero 3 --tp 2 --pp 2 --microbatches 2")
# MoE: the aux loss is per group (dp rank x microbatch), so every layout keeps 4 groups
# (docs/moe.md); router biases (--router-bias-update) travel in the checkpoint.
add_test(NAME equivalence.checkpoint_reshard_moe
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --base ${MT_CKPT_MOE} --save-at 4
                 --reference "--microbatches 4"
                 --pair "--dp 2 --ep 2 --zero 1 --microbatches 2|--microbatches 4"
                 --pair "--microbatches 4|--dp 4 --ep 2 --zero 2"
                 --pair "--dp 4 --ep 4|--dp 2 --ep 2 --pp 2 --microbatches 2")
set_tests_properties(equivalence.checkpoint_reshard_dense equivalence.checkpoint_resume_exact
                     equivalence.checkpoint_reshard_moe
                     PROPERTIES LABELS "equivalence;checkpoint" TIMEOUT 300)
add_test(NAME equivalence.checkpoint_reshard_mpi
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN} --base ${MT_CKPT_BASE} --save-at 4
                 --launcher "${MT_EQUIV_MPIRUN} -np 4 {bin}"
                 --pair "--backend mpi --dp 4 --zero 3|--backend mpi --dp 2 --tp 2 --sequence-parallel"
                 --pair "--backend mpi --tp 2 --pp 2 --microbatches 2|--backend mpi --dp 4 --zero 1")
add_test(NAME checkpoint_mpirun_supervisor
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/checkpoint/mpirun_supervisor_test.sh ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:meshtrain> ${MT_MPIRUN})
set_tests_properties(equivalence.checkpoint_reshard_mpi checkpoint_mpirun_supervisor
                     PROPERTIES LABELS "mpi;checkpoint" TIMEOUT 300)
