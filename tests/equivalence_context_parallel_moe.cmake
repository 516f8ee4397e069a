# Mixture of experts under context parallelism (docs/context_parallel.md, "Experts under cp";
# docs/contracts.md §9a, §11) against one worker at the same aux/capacity groups (one worker
# with --microbatches G against dp x microbatches = G; the cp ranks of a dp index share its
# groups): per-step losses and gradient norms, and the exported weights after the run. The
# models have capacity drops, an aux coefficient large enough that a missing cp reduction of
# its statistics moves the losses, and (llama) the sigmoid router's bias update, whose loads
# must be the whole group's on every cp rank. cp x ep: the ep groups inside a cp index, the
# expert replicas across cp.
if(NOT DEFINED MT_EQUIV)
  message(FATAL_ERROR "equivalence_context_parallel_moe.cmake needs equivalence.cmake's variables")
endif()
set(MT_CP_MOE_LLAMA "--arch llama --layers 3 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq 32 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5 --experts 4 --topk 2 --expert-ffn-dim 32 --shared-experts 1 --first-dense-layers 1 --capacity-factor 1.25 --aux-loss-coef 0.1")
set(MT_CP_MOE_SIGMOID "--router sigmoid --routed-scale 2 --router-bias-update 0.01")
add_test(NAME equivalence.cp_moe_llama_sigmoid
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --grad-norm-rtol 1e-4
                 --base "${MT_CP_MOE_LLAMA} ${MT_CP_MOE_SIGMOID}" --reference "--microbatches 2"
                 --layout "--dp 2 --ep 2 --cp 2"
                 --layout "--cp 2 --microbatches 2 --cp-comm allgather")
add_test(NAME equivalence.cp_moe_llama_softmax
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --grad-norm-rtol 1e-4
                 --base ${MT_CP_MOE_LLAMA} --reference "--microbatches 2"
                 --layout "--dp 2 --ep 2 --cp 2 --zero 1")
# gpt2's MoE (section 1): softmax router, GELU experts; the key-bias rows as
# equivalence_context_parallel.cmake explains.
add_test(NAME equivalence.cp_moe_gpt2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --grad-norm-rtol 1e-4
                 --base "${MT_EQUIV_BASE} --steps 6 --experts 4 --topk 2 --capacity-factor 1.25 --aux-loss-coef 0.1"
                 --reference "--microbatches 2"
                 --drop-rows transformer.h.0.attn.c_attn.bias:64:64
                 --drop-rows transformer.h.1.attn.c_attn.bias:64:64
                 --layout "--dp 2 --ep 2 --cp 2")
# The routing metrics (expert_load per block, aux_loss, dropped_frac) of every step equal one
# worker's: each cp rank records its group's whole statistics, summed over dp once. With tp's
# token split inside cp (sequence parallelism) a rank's rows are pieces of the zigzag chunks.
add_test(NAME equivalence.cp_moe_metrics
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/equivalence/moe_metrics_compare.py
                 --bin ${MT_EQUIV_BIN} --base "${MT_CP_MOE_LLAMA} ${MT_CP_MOE_SIGMOID}"
                 --reference "--microbatches 2" --blocks 2
                 --layout "--dp 2 --ep 2 --cp 2"
                 --layout "--cp 2 --tp 2 --sequence-parallel --microbatches 2")
set_tests_properties(equivalence.cp_moe_llama_sigmoid equivalence.cp_moe_llama_softmax
                     equivalence.cp_moe_gpt2 equivalence.cp_moe_metrics
                     PROPERTIES LABELS "equivalence;cp;moe" TIMEOUT 600)
# Sharded checkpoints of experts under cp x ep: each expert slice is written once (by rank 0
# of its replica group, which now spans cp) and the router biases with them; loaded at cp 1
# without ep, and the reverse, continuing with the uninterrupted run's losses and weights.
add_test(NAME equivalence.cp_moe_checkpoint_reshard
         COMMAND ${MT_EQUIV} reshard --bin ${MT_EQUIV_BIN}
                 --base "${MT_CP_MOE_LLAMA} ${MT_CP_MOE_SIGMOID} --steps 8" --save-at 4
                 --reference "--microbatches 2"
                 --pair "--dp 2 --ep 2 --cp 2|--microbatches 2"
                 --pair "--microbatches 2|--dp 2 --ep 2 --cp 2 --zero 1")
set_tests_properties(equivalence.cp_moe_checkpoint_reshard
                     PROPERTIES LABELS "equivalence;cp;moe;checkpoint" TIMEOUT 600)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME equivalence.cp_moe_full_matrix
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --grad-norm-rtol 1e-4
                   --base "${MT_CP_MOE_LLAMA} ${MT_CP_MOE_SIGMOID}" --reference "--microbatches 4"
                   --layout "--dp 2 --ep 2 --cp 4 --cp-comm allgather --microbatches 2"
                   --layout "--dp 2 --ep 2 --cp 2 --tp 2 --sequence-parallel --zero 3 --microbatches 2"
                   --layout "--dp 4 --ep 4 --cp 2 --zero 2"
                   --layout "--pp 3 --dp 2 --ep 2 --cp 2 --microbatches 2 --schedule 1f1b"
                   --layout "--dp 2 --ep 2 --cp 2 --microbatches 2 --recompute full --moe-overlap-parts 2")
  set_tests_properties(equivalence.cp_moe_full_matrix PROPERTIES LABELS "full;cp;moe" TIMEOUT 1800)
endif()
