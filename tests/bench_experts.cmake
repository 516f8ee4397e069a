# Grouped-expert benchmark (bench/bench_experts.cpp): 64 small SwiGLU experts at top-8 against
# one dense MLP of the same active FLOPs, grouped GEMMs against a loop of per-expert calls.
# The --quick run registered here only checks that every variant runs at small shapes, never
# how fast.
add_executable(bench_experts ${CMAKE_SOURCE_DIR}/bench/bench_experts.cpp)
target_link_libraries(bench_experts PRIVATE mt_kernels)
add_test(NAME bench_experts_quick COMMAND bench_experts --quick)
set_tests_properties(bench_experts_quick PROPERTIES TIMEOUT 120 LABELS bench)
# The same figure through the model's llama MoE layer (bench/bench_moe_layer.cpp: router,
# permutation and grouped experts against the dense SwiGLU MLP); --quick only checks it runs.
add_executable(bench_moe_layer ${CMAKE_SOURCE_DIR}/bench/bench_moe_layer.cpp)
target_link_libraries(bench_moe_layer PRIVATE mt_model)
add_test(NAME bench_moe_layer_quick COMMAND bench_moe_layer --quick)
set_tests_properties(bench_moe_layer_quick PROPERTIES TIMEOUT 120 LABELS bench)
