# Whole-step benchmark (bench/bench_step.cpp): one worker's forward + backward + AdamW on
# the issue's model configs with a per-kernel breakdown. The --quick run registered as a
# test only checks that it runs, never how fast.
add_executable(bench_step ${CMAKE_SOURCE_DIR}/bench/bench_step.cpp
                          ${CMAKE_SOURCE_DIR}/bench/step_kernel_table.cpp)
target_link_libraries(bench_step PRIVATE mt_train)
add_test(NAME bench_step_quick COMMAND bench_step --quick --configs a --threads 1)
set_tests_properties(bench_step_quick PROPERTIES LABELS bench TIMEOUT 120)
