# The linear layers' GEMMs against the planner's local GEMM formula for a calibrated profile
# (bench/bench_plan_gemm.cpp): a diagnosis, never a check. The --quick run registered as a
# test only checks that it runs, never how fast.
add_executable(bench_plan_gemm ${CMAKE_SOURCE_DIR}/bench/bench_plan_gemm.cpp)
target_link_libraries(bench_plan_gemm PRIVATE mt_plan)
add_test(NAME bench_plan_gemm_quick COMMAND bench_plan_gemm --quick)
set_tests_properties(bench_plan_gemm_quick PROPERTIES LABELS bench TIMEOUT 120)
