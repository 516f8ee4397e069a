# Kernel micro-benchmark (bench/bench_kernels.cpp); the --quick run registered as a test
# only checks that every kernel runs at the benchmark shapes, never how fast.
add_executable(bench_kernels ${CMAKE_SOURCE_DIR}/bench/bench_kernels.cpp)
target_link_libraries(bench_kernels PRIVATE mt_kernels)
add_test(NAME bench_kernels_quick COMMAND bench_kernels --quick --dims 256)
set_tests_properties(bench_kernels_quick PROPERTIES LABELS bench TIMEOUT 120)
