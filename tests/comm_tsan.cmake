# ThreadSanitizer run of the communication tests: local-backend ranks are threads sharing
# buffers, so a race there is a real bug. In a build configured with
# -DMESHTRAIN_SANITIZE=thread every test already runs under TSan; this adds one entry that
# runs the whole test_comm binary with halt_on_error, selectable with `ctest -L tsan`.
if(MESHTRAIN_SANITIZE STREQUAL "thread")
  add_test(NAME comm_tsan COMMAND test_comm)
  set_tests_properties(comm_tsan PROPERTIES
    LABELS "unit;tsan"
    ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1"
    TIMEOUT 900)
endif()
