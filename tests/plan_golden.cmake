# The planner's predictions against the stored golden file (bench/planner/plan_golden.py):
# every case of the README, docs/planner.md, the published and modern runs, the local
# closed-loop layouts against the checked-in profile, --compare, --explain and the refusals.
# A change that moves a prediction must recapture the file in its own commit, saying why;
# before this test, two branches found the file stale at main's head.
# The default suite leaves out the cases another case already pins (golden_cases.py's
# FULL_ONLY); MESHTRAIN_FULL_TESTS=1 runs every case.
add_test(NAME plan.golden COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/bench/planner/plan_golden.py
                                  $<TARGET_FILE:meshtrain> --default-suite)
set_tests_properties(plan.golden PROPERTIES LABELS binary TIMEOUT 600)
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME plan.golden_full
           COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/bench/planner/plan_golden.py
                   $<TARGET_FILE:meshtrain>)
  set_tests_properties(plan.golden_full PROPERTIES LABELS full TIMEOUT 900)
endif()
