# DualPipe-V (--schedule dualpipev, docs/pipeline.md) against one worker: the V placement
# (stage 0 holds the embedding and the head, one shared edge unit for the tied wte), F&B
# pairs, split backward, composed with dp x ZeRO 0-3, tp +/- sp, uneven --stage-layers,
# the llama block (untied and tied), bf16, recomputation (bit for bit), MoE, eval and
# sample, resume across layouts, and MPI processes. Losses and exported weights at the
# harness's tolerances, as equivalence.pp_schedules. About 20 runs of a second each;
# MESHTRAIN_FULL_TESTS=1 adds pp 4 x m 16 and ZeRO 0-3 at pp 2 and 4.
if(NOT DEFINED MT_EQUIV OR NOT DEFINED MT_MPIRUN OR NOT DEFINED MT_EQUIV_MOE_PP)
  message(FATAL_ERROR "equivalence_dualpipev.cmake needs equivalence.cmake's and comm_mpi.cmake's variables")
endif()
set(MT_DPV "--schedule dualpipev")
set(MT_DPV_GPT "--layers 4 --dim 64 --heads 4 --seq 32 --batch 8 --steps 10 --lr-schedule constant --grad-clip 0.5")
set(MT_DPV_LLAMA "--arch llama --layers 4 --dim 64 --heads 4 --kv-heads 2 --seq 32 --batch 8 --steps 10 --lr-schedule constant --grad-clip 0.5")
add_test(NAME equivalence.pp_dualpipev
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --repeat --base ${MT_DPV_GPT}
                 --layout "--pp 2 --microbatches 4 ${MT_DPV}"
                 --layout "--pp 4 --microbatches 8 ${MT_DPV}"
                 --layout "--pp 2 --microbatches 4 ${MT_DPV} --stage-layers 2,1,0,1"
                 --layout "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 1"
                 --layout "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 3"
                 --layout "--dp 2 --pp 2 --tp 2 --sequence-parallel --microbatches 4 ${MT_DPV} --zero 2")
add_test(NAME equivalence.pp_dualpipev_resume
         COMMAND ${MT_EQUIV} resume --bin ${MT_EQUIV_BIN} --base ${MT_DPV_GPT}
                 --pair "--pp 2 --microbatches 4 ${MT_DPV}|"
                 --pair "--pp 2 --microbatches 4 --schedule 1f1b|--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 3")
add_test(NAME equivalence.pp_dualpipev_eval_sample
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --sample 32
                 --base "--layers 4 --dim 64 --heads 4 --seq 32 --batch 8 --steps 4 --lr-schedule constant --eval-every 2 --eval-batches 2"
                 --layout "--pp 2 --microbatches 4 ${MT_DPV}")
# MoE blocks in both chunks of a stage; one worker with the same 4 aux-loss groups.
add_test(NAME equivalence.moe_pp_dualpipev
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base ${MT_EQUIV_MOE_PP} --reference "--microbatches 4"
                 --layout "--pp 2 --microbatches 4 ${MT_DPV}")
# The llama block: the untied head (model.norm and lm_head.weight in stage 0's up chunk) and
# the tied one (embed_tokens shared by both chunks of stage 0).
add_test(NAME equivalence.llama_pp_dualpipev
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_DPV_LLAMA}
                 --layout "--pp 2 --microbatches 4 ${MT_DPV}"
                 --layout "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 2")
add_test(NAME equivalence.llama_pp_dualpipev_tied
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base "${MT_DPV_LLAMA} --tie-embeddings"
                 --layout "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 3")
# Recomputation changes nothing, bit for bit, under the V and ZeRO-3's gathers.
add_test(NAME equivalence.llama_dualpipev_recompute
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_DPV_LLAMA} ${MT_EQUIV_EXACT}
                 --reference "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 3"
                 --layout "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 3 --recompute selective"
                 --layout "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 3 --recompute full")
# bf16 against bf16 one worker (the tolerances of equivalence.llama_bf16).
add_test(NAME equivalence.llama_dualpipev_bf16
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base "${MT_DPV_LLAMA} --precision bf16"
                 --loss-rtol 2e-3 --weight-rtol 2e-2
                 --layout "--pp 2 --microbatches 4 ${MT_DPV}"
                 --layout "--dp 2 --pp 2 --microbatches 4 ${MT_DPV} --zero 1")
set_tests_properties(equivalence.pp_dualpipev equivalence.pp_dualpipev_resume
                     equivalence.pp_dualpipev_eval_sample
                     PROPERTIES LABELS "equivalence;pp" TIMEOUT 300)
set_tests_properties(equivalence.moe_pp_dualpipev PROPERTIES LABELS "equivalence;moe;pp" TIMEOUT 300)
set_tests_properties(equivalence.llama_pp_dualpipev equivalence.llama_pp_dualpipev_tied
                     equivalence.llama_dualpipev_recompute equivalence.llama_dualpipev_bf16
                     PROPERTIES LABELS "equivalence;llama;pp" TIMEOUT 300)
add_test(NAME equivalence.pp_dualpipev_mpi_np2
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_DPV_GPT}
                 --launcher "${MT_EQUIV_MPIRUN} -np 2 {bin}"
                 --layout "--backend mpi --pp 2 --microbatches 4 ${MT_DPV}")
set_tests_properties(equivalence.pp_dualpipev_mpi_np2 PROPERTIES LABELS "mpi;pp" TIMEOUT 300)

if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  # pp {2,4} x m {2pp, 4pp} x ZeRO 0-3 at dp 1 and 2, gpt2 and llama; MoE with ep.
  set(dpv_layouts)
  foreach(pp 2 4)
    math(EXPR m1 "2 * ${pp}")
    math(EXPR m2 "4 * ${pp}")
    foreach(mb ${m1} ${m2})
      list(APPEND dpv_layouts --layout "--pp ${pp} --microbatches ${mb} ${MT_DPV}")
      foreach(zero 0 1 2 3)
        list(APPEND dpv_layouts --layout "--dp 2 --pp ${pp} --microbatches ${mb} ${MT_DPV} --zero ${zero}")
      endforeach()
    endforeach()
  endforeach()
  foreach(arch gpt llama)
    string(TOUPPER ${arch} ARCH)
    # dp 2 x m 16 needs a batch of 32.
    string(REPLACE "--batch 8" "--batch 32" base "${MT_DPV_${ARCH}}")
    add_test(NAME equivalence.pp_dualpipev_full_${arch}
             COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${base} ${dpv_layouts})
    set_tests_properties(equivalence.pp_dualpipev_full_${arch}
                         PROPERTIES LABELS "full;pp" TIMEOUT 1800)
  endforeach()
  add_test(NAME equivalence.moe_pp_dualpipev_full
           COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                   --base ${MT_EQUIV_MOE_PP} --reference "--microbatches 8"
                   --layout "--pp 2 --dp 2 --ep 2 --microbatches 4 ${MT_DPV} --zero 1"
                   --layout "--pp 4 --microbatches 8 ${MT_DPV}")
  set_tests_properties(equivalence.moe_pp_dualpipev_full PROPERTIES LABELS "full;moe" TIMEOUT 900)
endif()
