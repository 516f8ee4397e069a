# Hybrid world (--ranks-per-process): a driver run under mpirun with K ranks per process
# (tests/comm_mpi/comm_hybrid_driver.cpp). Uses MT_MPIRUN, MT_MPI_ENV and MT_EXPECT from
# comm_mpi.cmake (fragments are included in name order, so this one comes after it).
add_executable(comm_hybrid_driver ${CMAKE_SOURCE_DIR}/tests/comm_mpi/comm_hybrid_driver.cpp)
target_link_libraries(comm_hybrid_driver PRIVATE mt_comm)
set(MT_HYBRID_DRIVER $<TARGET_FILE:comm_hybrid_driver>)

# 2 processes x 2 and x 3 threads: counts 0/1/7/1000/2^20+3 on the (hierarchical) world,
# the small counts on groups inside a process, across processes and mixed.
add_test(NAME comm_hybrid_suite_2x2 COMMAND ${MT_MPIRUN} -np 2 ${MT_HYBRID_DRIVER} 2 suite)
add_test(NAME comm_hybrid_suite_2x3 COMMAND ${MT_MPIRUN} -np 2 ${MT_HYBRID_DRIVER} 3 suite)
add_test(NAME comm_hybrid_suite_checked_2x2
         COMMAND ${MT_MPIRUN} -np 2 ${MT_HYBRID_DRIVER} 2 suite --quick)
set_tests_properties(comm_hybrid_suite_2x2 comm_hybrid_suite_2x3 comm_hybrid_suite_checked_2x2
                     PROPERTIES LABELS "mpi;hybrid" TIMEOUT 240 ENVIRONMENT "${MT_MPI_ENV}")
set_property(TEST comm_hybrid_suite_checked_2x2 APPEND PROPERTY ENVIRONMENT
             MESHTRAIN_CHECK_COLLECTIVES=1)

# Faults: exit code and message within a bound that leaves a loaded machine generous room
# (the timeout mode waits 10 s by design).
add_test(NAME comm_hybrid_fault_rank_throws
         COMMAND ${MT_EXPECT} 1 "meshtrain: error: rank 3: injected failure at step 3" 120
                 ${MT_MPIRUN} -np 2 ${MT_HYBRID_DRIVER} 2 fault)
add_test(NAME comm_hybrid_fault_timeout
         COMMAND ${MT_EXPECT} 1 "meshtrain: error: rank [0-3]: .*(rank 1 did not arrive within 10 s|no completion within 10 s)" 120
                 ${MT_MPIRUN} -np 2 ${MT_HYBRID_DRIVER} 2 timeout)
add_test(NAME comm_hybrid_abort_together
         COMMAND ${MT_EXPECT} 1 "meshtrain: error: rank [0-5]: aborted together" 120
                 ${MT_MPIRUN} -np 2 ${MT_HYBRID_DRIVER} 3 abort-together)
add_test(NAME comm_hybrid_usage_all
         COMMAND ${MT_EXPECT} 2 "^meshtrain: error: bad value for --dp" 120
                 ${MT_MPIRUN} -np 2 ${MT_HYBRID_DRIVER} 2 usage-all)
set_tests_properties(comm_hybrid_fault_rank_throws comm_hybrid_fault_timeout comm_hybrid_abort_together
                     comm_hybrid_usage_all
                     PROPERTIES LABELS "mpi;hybrid" TIMEOUT 150 ENVIRONMENT "${MT_MPI_ENV}")
set_property(TEST comm_hybrid_usage_all APPEND PROPERTY ENVIRONMENT EXPECT_ERROR_LINES=1)
# Every rank thread aborts at once: the process ends by MPI_Abort's code, never by SIGABRT
# (a second MPI_Abort in a process returns, and std::abort after it ended comm_hybrid_fault_timeout
# with exit 134 in a CI run when two ranks of one process timed out together).
set_property(TEST comm_hybrid_abort_together APPEND PROPERTY ENVIRONMENT
             "EXPECT_NO_MATCH=received signal|exited on signal")

# The trainer on the hybrid world: --print-layout before anything runs; a fault injected in
# rank 3 (process 1's second thread) ends the job with exit 1 naming it; a layout the
# processes cannot hold evenly is one usage line (exit 2) before ranks start.
set(MT_HYBRID_TRAIN --backend mpi --ranks-per-process 2 --layers 1 --dim 32 --heads 2 --seq 16
                    --batch 8 --steps 4 --quiet)
add_test(NAME hybrid_print_layout
         COMMAND $<TARGET_FILE:meshtrain> train --backend mpi --ranks-per-process 2 --dp 2 --tp 2
                 --print-layout)
set_tests_properties(hybrid_print_layout PROPERTIES LABELS "binary;hybrid" PASS_REGULAR_EXPRESSION
  "2 processes x 2 ranks per process.*tp\\[0,1\\]  inside a process.*dp\\[0,2\\]  across processes \\(MPI\\)")
add_test(NAME hybrid_train_fault
         COMMAND ${MT_EXPECT} 1 "meshtrain: error: rank 3: injected fault at step 2" 120
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> train ${MT_HYBRID_TRAIN} --dp 4
                 --timeout 60)
add_test(NAME hybrid_train_uneven_layout
         COMMAND ${MT_EXPECT} 2 "meshtrain: error: .*--ranks-per-process 3 puts different numbers of the members of dp\\[0,2,4\\]" 120
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> train ${MT_HYBRID_TRAIN}
                 --ranks-per-process 3 --dp 3 --tp 2 --batch 6)
set_tests_properties(hybrid_train_fault hybrid_train_uneven_layout PROPERTIES LABELS "mpi;hybrid" TIMEOUT 150
                     ENVIRONMENT "${MT_MPI_ENV}")
set_property(TEST hybrid_train_fault APPEND PROPERTY ENVIRONMENT MESHTRAIN_FAULT=rank:3:step:2)
