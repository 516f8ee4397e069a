# The MoE layer against a PyTorch reference (tests/reference/moe_torch.py) on the same
# weights and inputs: outputs, aux loss, load, and every gradient, for k = 1 and 2,
# dropless and with capacity drops, and with the selection bias. The driver is a tiny
# executable on mt_model; the script runs it and recomputes everything in float64.
add_executable(moe_reference_driver ${CMAKE_CURRENT_SOURCE_DIR}/moe_reference_driver.cpp)
target_link_libraries(moe_reference_driver PRIVATE mt_model)
target_include_directories(moe_reference_driver PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})

set(MESHTRAIN_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch for the reference tests")
# name: k capacity-factor gamma
foreach(case "k1_dropless:1:0:0" "k2_dropless:2:0:0" "k1_capacity:1:1.0:0"
             "k2_capacity:2:0.75:0" "k2_capacity_bias:2:1.25:0.01")
  string(REPLACE ":" ";" parts ${case})
  list(GET parts 0 name)
  list(GET parts 1 k)
  list(GET parts 2 cap)
  list(GET parts 3 gamma)
  add_test(NAME moe.vs_torch.${name}
           COMMAND ${MESHTRAIN_TORCH_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/reference/moe_torch.py
                   --driver $<TARGET_FILE:moe_reference_driver> --k ${k} --capacity ${cap}
                   --gamma ${gamma} --workdir ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(moe.vs_torch.${name} PROPERTIES LABELS "reference;moe" TIMEOUT 120)
endforeach()

# MoE layer benchmark (bench/bench_moe.cpp); the --quick run only checks that it runs.
add_executable(bench_moe ${CMAKE_SOURCE_DIR}/bench/bench_moe.cpp)
target_link_libraries(bench_moe PRIVATE mt_parallel)
add_test(NAME bench_moe_quick COMMAND bench_moe --quick)
set_tests_properties(bench_moe_quick PROPERTIES LABELS "bench;moe" TIMEOUT 120)
