# The planner's predictions against the stored golden file (bench/planner/plan_golden.py):
# every case of the README, docs/planner.md, the published and modern runs, the local
# closed-loop layouts against the checked-in profile, --compare, --explain and the refusals.
# A change that moves a prediction must recapture the file in its own commit, saying why;
# before this test, two branches found the file stale at main's head.
add_test(NAME plan.golden COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/bench/planner/plan_golden.py
                                  $<TARGET_FILE:meshtrain>)
set_tests_properties(plan.golden PROPERTIES LABELS binary TIMEOUT 600)
