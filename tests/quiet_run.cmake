# bench/planner/quiet_run.py (issue #30's calibration, closed loop and brute force in one
# command): its summary and duration-estimate rules with stand-in predictions. The runs
# themselves time training steps and are started by hand on a quiet machine.
add_test(NAME bench.quiet_run_rules COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/quiet_run_test.py)
set_tests_properties(bench.quiet_run_rules PROPERTIES LABELS unit)
