# Attention-core benchmark (bench/bench_attention.cpp): the GPT block's attention against flash
# attention (fp32, bf16) and GQA against MHA. The --quick run registered here only checks that
# every variant runs at small shapes, never how fast.
add_executable(bench_attention ${CMAKE_SOURCE_DIR}/bench/bench_attention.cpp)
target_link_libraries(bench_attention PRIVATE mt_kernels)
add_test(NAME bench_attention_quick COMMAND bench_attention --quick)
set_tests_properties(bench_attention_quick PROPERTIES TIMEOUT 300 LABELS bench)
