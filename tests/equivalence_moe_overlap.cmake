# --moe-overlap-parts (docs/moe.md, "Overlapped all-to-all"): the expert all-to-alls of one
# part of a microbatch overlapped with the experts of another, against one worker at the same
# aux/capacity groups: losses, gradient norms and exported weights after the steps. gpt2's MoE
# with capacity drops at ep 2 and 4 (parts 2, 4, and 3 parts of uneven size), the llama MoE
# (fine-grained and shared experts, sigmoid router, bias update) at ep 2; then the same over
# MPI processes and in the hybrid world, where ep 4 spans both processes. Uses the variables
# of equivalence.cmake, equivalence_hybrid.cmake and equivalence_llama_moe.cmake.
if(NOT DEFINED MT_EQUIV OR NOT DEFINED MT_HYB OR NOT DEFINED MT_LLAMA_MOE)
  message(FATAL_ERROR "equivalence_moe_overlap.cmake needs the equivalence fragments' variables")
endif()
set(MT_OVERLAP_GPT "${MT_EQUIV_MOE} --capacity-factor 1.25 --steps 6")
add_test(NAME equivalence.moe_overlap
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_OVERLAP_GPT}
                 --grad-norm-rtol 1e-5 --reference "--microbatches 4"
                 --layout "--dp 4 --ep 2 --moe-overlap-parts 2"
                 --layout "--dp 4 --ep 4 --moe-overlap-parts 4"
                 --layout "--dp 2 --ep 2 --microbatches 2 --moe-overlap-parts 3")
add_test(NAME equivalence.llama_moe_overlap
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_LLAMA_MOE}
                 --grad-norm-rtol 1e-5 --reference "--microbatches 2"
                 --layout "--dp 2 --ep 2 --moe-overlap-parts 2")
set_tests_properties(equivalence.moe_overlap equivalence.llama_moe_overlap
                     PROPERTIES LABELS "equivalence;moe" TIMEOUT 300)
add_test(NAME equivalence.moe_overlap_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_OVERLAP_GPT}
                 --grad-norm-rtol 1e-5 --reference "--microbatches 2"
                 --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --dp 2 --ep 2 --moe-overlap-parts 2")
set_tests_properties(equivalence.moe_overlap_mpi_np2 PROPERTIES LABELS "mpi;moe" TIMEOUT 300)
add_test(NAME equivalence.hybrid_moe_overlap
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_OVERLAP_GPT}
                 --grad-norm-rtol 1e-5 --reference "--microbatches 4"
                 --launcher "${MT_EQUIV_HYBRID}"
                 --layout "${MT_HYB} --dp 4 --ep 4 --moe-overlap-parts 2")
set_tests_properties(equivalence.hybrid_moe_overlap PROPERTIES LABELS "mpi;hybrid" TIMEOUT 300)
# Heavier: the llama MoE at ep 4, with ZeRO 3, tp's token split, pipeline stages and full
# recomputation; bf16 at its tolerances; ep 4 over 4 MPI processes.
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME equivalence.moe_overlap_full
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                   --base "${MT_LLAMA_MOE_MODEL} --capacity-factor 0" --grad-norm-rtol 1e-5
                   --reference "--microbatches 4"
                   --layout "--dp 4 --ep 4 --zero 3 --moe-overlap-parts 4"
                   --layout "--dp 2 --tp 2 --sequence-parallel --ep 2 --microbatches 2 --moe-overlap-parts 2"
                   --layout "--dp 2 --tp 2 --ep 2 --microbatches 2 --moe-overlap-parts 2"
                   --layout "--pp 3 --dp 2 --ep 2 --microbatches 2 --moe-overlap-parts 2"
                   --layout "--dp 2 --ep 2 --microbatches 2 --recompute full --moe-overlap-parts 3")
  add_test(NAME equivalence.moe_overlap_bf16_full
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                   --base "${MT_LLAMA_MOE_MODEL} --router sigmoid --routed-scale 2 --precision bf16"
                   --loss-rtol 2e-3 --weight-rtol 2e-2 --reference "--microbatches 2"
                   --layout "--dp 2 --ep 2 --moe-overlap-parts 2")
  set_tests_properties(equivalence.moe_overlap_full equivalence.moe_overlap_bf16_full
                       PROPERTIES LABELS "full;moe" TIMEOUT 1200)
  add_test(NAME equivalence.moe_overlap_mpi_np4_full
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_OVERLAP_GPT}
                   --grad-norm-rtol 1e-5 --reference "--microbatches 4"
                   --launcher "${MT_EQUIV_MPIRUN} -np 4 {bin}"
                   --layout "--backend mpi --dp 4 --ep 4 --moe-overlap-parts 4")
  set_tests_properties(equivalence.moe_overlap_mpi_np4_full PROPERTIES LABELS "mpi;moe" TIMEOUT 1200)
endif()
