# Every flag of the user-facing commands with mistyped values (tests/cli/flag_sweep.py):
# exit 0, or exit 2 with one line; never a crash, a hang or exit 1. About 1600 runs.
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME cli_flag_sweep
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli/flag_sweep.py
                   $<TARGET_FILE:meshtrain> ${CMAKE_CURRENT_BINARY_DIR}/flag_sweep)
  set_tests_properties(cli_flag_sweep PROPERTIES TIMEOUT 3000 LABELS "full")
endif()
