# PyTorch reference tests (tests/reference/): the whole model against Debian's
# python3-torch on the same weights and batches. Debian's interpreter on purpose: a
# pyenv/venv python3 earlier on PATH usually has no torch.
set(MESHTRAIN_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch for the reference tests")
set(reference_dir ${CMAKE_CURRENT_SOURCE_DIR}/reference)

# The reference itself against an independent numpy reading of the contract (no binary).
add_test(NAME reference.selftest
         COMMAND ${MESHTRAIN_TORCH_PYTHON} ${reference_dir}/selftest_reference.py)
# The Llama reference (llama_torch.py) and its files (hf_dir.py, safetensors in bf16/f16).
add_test(NAME reference.selftest_llama
         COMMAND ${MESHTRAIN_TORCH_PYTHON} ${reference_dir}/selftest_llama.py)
add_test(NAME reference.selftest_hf_dir
         COMMAND ${MESHTRAIN_TORCH_PYTHON} ${reference_dir}/selftest_hf_dir.py)
# The references' --dropout masks (dropout_masks.py): Philox against Random123's vectors.
add_test(NAME reference.selftest_dropout_masks
         COMMAND ${MESHTRAIN_TORCH_PYTHON} ${reference_dir}/dropout_masks.py)
set_tests_properties(reference.selftest_llama reference.selftest_hf_dir
                     reference.selftest_dropout_masks
                     PROPERTIES LABELS reference TIMEOUT 300)

# One ctest entry per case, so a failure names the configuration that broke.
foreach(case l1_v256_clip l3_v2048_mb2 l2_h8_const_wrap l2_seq_lt_positions l2_bf16 l3_v2048_bf16
        l2_v100000_v2shard)
  add_test(NAME reference.vs_torch.${case}
           COMMAND ${MESHTRAIN_TORCH_PYTHON} ${reference_dir}/test_vs_torch.py
                   $<TARGET_FILE:meshtrain> --case ${case})
endforeach()

set_tests_properties(reference.selftest PROPERTIES LABELS reference TIMEOUT 120)
set_tests_properties(reference.vs_torch.l1_v256_clip reference.vs_torch.l3_v2048_mb2
                     reference.vs_torch.l2_h8_const_wrap reference.vs_torch.l2_seq_lt_positions
                     reference.vs_torch.l2_bf16 reference.vs_torch.l3_v2048_bf16
                     reference.vs_torch.l2_v100000_v2shard
                     PROPERTIES LABELS reference TIMEOUT 300)

# The --arch llama cases (tests/reference/llama_cases.py, docs/contracts.md section 9): the
# dense block and the DeepSeek-V3 MoE layer (softmax and sigmoid routers, docs/moe.md) against
# the PyTorch reference, and Hugging Face directories written by hand in PyTorch (hf_dir.py)
# read with --init-from DIR (llama_rope_scaling, llama_hf_sharded_bf16, llama_hf_f16_tied).
set(mt_llama_cases llama_gqa llama_dropout llama_mqa_v2048_mb2 llama_tied llama_head_dim llama_bf16
                   llama_v2048_bf16 llama_rope_scaling llama_hf_sharded_bf16 llama_hf_f16_tied
                   llama_moe_softmax llama_moe_sigmoid_bias)
foreach(case ${mt_llama_cases})
  add_test(NAME reference.vs_torch.${case}
           COMMAND ${MESHTRAIN_TORCH_PYTHON} ${reference_dir}/test_vs_torch.py
                   $<TARGET_FILE:meshtrain> --case ${case})
  set_tests_properties(reference.vs_torch.${case} PROPERTIES LABELS reference TIMEOUT 600)
endforeach()
