# Kernel micro-benchmark (bench/bench_kernels.cpp); the --quick run registered as a test
# only checks that every kernel runs at the benchmark shapes, never how fast.
add_executable(bench_kernels ${CMAKE_SOURCE_DIR}/bench/bench_kernels.cpp)
target_link_libraries(bench_kernels PRIVATE mt_kernels)
add_test(NAME bench_kernels_quick COMMAND bench_kernels --quick --dims 256)
set_tests_properties(bench_kernels_quick PROPERTIES LABELS bench TIMEOUT 120)

# The dense bf16 linears' GEMMs, oneDNN against the packed AMX tile kernel, alternated
# (bench/bench_dense_bf16.cpp); the --quick run only checks that both paths run.
add_executable(bench_dense_bf16 ${CMAKE_SOURCE_DIR}/bench/bench_dense_bf16.cpp)
target_link_libraries(bench_dense_bf16 PRIVATE mt_kernels)
add_test(NAME bench_dense_bf16_quick COMMAND bench_dense_bf16 --quick --shapes d256,mlp,packs)
set_tests_properties(bench_dense_bf16_quick PROPERTIES LABELS bench TIMEOUT 120)

# Every linear GEMM of a training step on each routine that can run it, with its share of
# the GEMM peak (bench/bench_linear_gemms.cpp); the --quick run only checks that all run.
add_executable(bench_linear_gemms ${CMAKE_SOURCE_DIR}/bench/bench_linear_gemms.cpp)
target_link_libraries(bench_linear_gemms PRIVATE mt_kernels)
add_test(NAME bench_linear_gemms_quick COMMAND bench_linear_gemms --quick --shapes d128)
set_tests_properties(bench_linear_gemms_quick PROPERTIES LABELS bench TIMEOUT 120)
