# bench/planner/loop_rounds.py (the closed loop's re-measure rule) and loop_report.py's
# listing of the layouts it leaves unmeasurable, with a stand-in measurement (no binary,
# no timing).
add_test(NAME bench.closed_loop_remeasure_rules
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/closed_loop_rounds_test.py)
set_tests_properties(bench.closed_loop_remeasure_rules PROPERTIES LABELS unit)
