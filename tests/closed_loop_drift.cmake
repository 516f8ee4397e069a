# bench/planner/drift_check.py (the closed loop's check of the calibration's reference step
# between batches of layouts): its band, flag and report rules with a stand-in measurement.
# The closed loop itself times training runs and is run by hand on a quiet machine.
add_test(NAME bench.closed_loop_drift_rules
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/closed_loop_drift_test.py)
set_tests_properties(bench.closed_loop_drift_rules PROPERTIES LABELS unit)
