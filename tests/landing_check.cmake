# bench/landing_check.py (the landing checklist's alternated speed check against the previous
# landing): its argument parsing, spread rule and output parsing. The check itself times
# benchmarks and is run by hand on a quiet machine, never by the suite.
add_test(NAME bench.landing_check_rules
         COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/landing_check_test.py)
set_tests_properties(bench.landing_check_rules PROPERTIES LABELS unit)
