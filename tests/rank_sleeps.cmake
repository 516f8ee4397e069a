# bench/planner/rank_sleeps.py (issue #30, stop 47: where a layout's rank threads sleep):
# its attribution of sleeps to trace phases on a stand-in trace and stand-in sched_switch
# lines. The tool itself runs perf and training steps and is started by hand.
add_test(NAME bench.rank_sleeps_rules COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/rank_sleeps_test.py)
set_tests_properties(bench.rank_sleeps_rules PROPERTIES LABELS unit)
