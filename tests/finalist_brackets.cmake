# bench/planner/finalist_brackets.py (the brute force's finalists in brackets, the first
# choice's ratio per bracket and the rule for when it is settled) through
# brute_force.remeasure_finalists, with stand-in hosts that drift (no binary, no timing).
add_test(NAME bench.finalist_brackets_rules
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/finalist_brackets_test.py)
set_tests_properties(bench.finalist_brackets_rules PROPERTIES LABELS unit)
