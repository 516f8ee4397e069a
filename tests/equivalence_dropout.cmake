# --dropout (docs/contracts.md §1) in every block, precision and layout: the masks are drawn by
# (seed, step, site, global token, feature), the probabilities' by the query's global token and
# the key's true position inside the flash core, so each layout trains one worker's model with
# dropout on: per-step losses, gradient norms, validation losses (evaluation without dropout)
# and the exported weights per tensor against one worker. The llama block at dp, tp with
# sequence parallelism, pp, cp (ring, and all-gather with tp); the gpt2 block under cp; bf16
# (both blocks) within the bf16 tolerances of the other bf16 equivalence tests; and a resume
# across layouts (the mask of step k does not depend on where the run restarted).
if(NOT DEFINED MT_EQUIV)
  message(FATAL_ERROR "equivalence_dropout.cmake needs equivalence.cmake's variables")
endif()
set(MT_DROP_LLAMA "--arch llama --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 96 --seq 32 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5 --dropout 0.2")
set(MT_DROP_GPT2 "--layers 2 --dim 64 --heads 4 --seq 32 --batch 8 --steps 6 --lr-schedule constant --grad-clip 0.5 --dropout 0.2")
# The gpt2 key bias rows (exact gradient zero: softmax ignores a shift shared by every key)
# carry rounding noise that Adam scales to full steps: left out of the weight comparison, as
# equivalence_context_parallel.cmake's gpt2 cases do.
set(MT_DROP_GPT2_KEY_BIAS --drop-rows transformer.h.0.attn.c_attn.bias:64:64
                          --drop-rows transformer.h.1.attn.c_attn.bias:64:64)
add_test(NAME equivalence.llama_dropout
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "${MT_DROP_LLAMA} --eval-every 3 --eval-batches 1" --repeat
                 --grad-norm-rtol 1e-4
                 --layout "--dp 2 --microbatches 2" --layout "--tp 2 --sequence-parallel"
                 --layout "--pp 2 --microbatches 4" --layout "--cp 2"
                 --layout "--cp 2 --cp-comm allgather --tp 2")
add_test(NAME equivalence.gpt2_cp_dropout
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_DROP_GPT2} --grad-norm-rtol 1e-4
                 ${MT_DROP_GPT2_KEY_BIAS} --layout "--cp 2" --layout "--cp 2 --dp 2 --tp 2 --sequence-parallel")
add_test(NAME equivalence.bf16_dropout
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base "${MT_DROP_LLAMA} --precision bf16"
                 --loss-rtol 2e-3 --weight-rtol 2e-2
                 --layout "--dp 2" --layout "--tp 2" --layout "--cp 2" --layout "--pp 2 --microbatches 2")
add_test(NAME equivalence.gpt2_bf16_dropout
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base "${MT_DROP_GPT2} --precision bf16"
                 --loss-rtol 2e-3 --weight-rtol 2e-2 ${MT_DROP_GPT2_KEY_BIAS}
                 --layout "--dp 2" --layout "--cp 2 --tp 2")
add_test(NAME equivalence.dropout_resume
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_DROP_LLAMA} --save-at 3
                 --pair "--cp 2|--dp 2" --pair "--tp 2|")
set_tests_properties(equivalence.llama_dropout equivalence.gpt2_cp_dropout
                     equivalence.bf16_dropout equivalence.gpt2_bf16_dropout
                     equivalence.dropout_resume
                     PROPERTIES LABELS "equivalence;dropout" TIMEOUT 600)
