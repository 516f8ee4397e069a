# One small all-reduce between two rank threads by placement (bound / unbound / stacked on
# one core) and load (idle / a tp2-sized GEMM between collectives)
# (bench/bench_collective_placement.cpp): a diagnosis, never a check. The --quick run
# registered as a test only checks that it runs, never how fast.
add_executable(bench_collective_placement ${CMAKE_SOURCE_DIR}/bench/bench_collective_placement.cpp)
target_link_libraries(bench_collective_placement PRIVATE mt_comm mt_kernels)
add_test(NAME bench_collective_placement_quick COMMAND bench_collective_placement --quick)
set_tests_properties(bench_collective_placement_quick PROPERTIES LABELS bench TIMEOUT 120)
