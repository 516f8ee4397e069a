# Pipeline bubble benchmark (bench/bench_pp.cpp): measured vs theoretical bubble at pp = 2.
# The --quick run registered as a test only checks that it runs, never how fast.
add_executable(bench_pp ${CMAKE_SOURCE_DIR}/bench/bench_pp.cpp)
target_link_libraries(bench_pp PRIVATE mt_parallel)
add_test(NAME bench_pp_quick COMMAND bench_pp --quick)
set_tests_properties(bench_pp_quick PROPERTIES LABELS bench TIMEOUT 120)
