# bench/planner/microbatch_probe.py (the calibration's per-microbatch fit, read as the
# calibration reads it and from a bracket of its four counts), with stand-in steps.
add_test(NAME bench.microbatch_probe_rules
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/microbatch_probe_test.py)
set_tests_properties(bench.microbatch_probe_rules PROPERTIES LABELS unit)
