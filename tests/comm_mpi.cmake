# MPI backend: a driver run under mpirun (CI runs as root, hence --allow-run-as-root and the
# OMPI_ALLOW_RUN_AS_ROOT* variables; --oversubscribe --bind-to none for 4 ranks on 2 cores),
# and the raw-MPI_Allreduce baseline benchmark.
add_executable(comm_mpi_driver ${CMAKE_SOURCE_DIR}/tests/comm_mpi/comm_mpi_driver.cpp)
target_link_libraries(comm_mpi_driver PRIVATE mt_comm)

add_executable(bench_comm_mpi_raw ${CMAKE_SOURCE_DIR}/bench/comm_mpi_raw.cpp)
target_link_libraries(bench_comm_mpi_raw PRIVATE mt_comm)

set(MT_MPIRUN ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
set(MT_MPI_ENV OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
set(MT_EXPECT ${CMAKE_SOURCE_DIR}/tests/comm_mpi/expect_exit.sh)
set(MT_DRIVER $<TARGET_FILE:comm_mpi_driver>)

add_test(NAME comm_mpi_suite_np2 COMMAND ${MT_MPIRUN} -np 2 ${MT_DRIVER} suite)
add_test(NAME comm_mpi_suite_np4 COMMAND ${MT_MPIRUN} -np 4 ${MT_DRIVER} suite)
# The debug mode must not report agreeing calls as mismatched.
add_test(NAME comm_mpi_suite_checked_np2 COMMAND ${MT_MPIRUN} -np 2 ${MT_DRIVER} suite --quick)
set_tests_properties(comm_mpi_suite_np2 comm_mpi_suite_np4 comm_mpi_suite_checked_np2
                     PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${MT_MPI_ENV}")
set_property(TEST comm_mpi_suite_checked_np2 APPEND PROPERTY ENVIRONMENT
             MESHTRAIN_CHECK_COLLECTIVES=1)

# Nonblocking collectives move while the ranks make no MPI call (the progress thread).
add_test(NAME comm_mpi_background_progress COMMAND ${MT_MPIRUN} -np 2 ${MT_DRIVER} background)
set_tests_properties(comm_mpi_background_progress
                     PROPERTIES LABELS mpi TIMEOUT 60 ENVIRONMENT "${MT_MPI_ENV}")

# Faults: each must end with the right exit code and message, within the time limit.
add_test(NAME comm_mpi_fault_rank_throws
         COMMAND ${MT_EXPECT} 1 "meshtrain: error: rank 1: injected failure" 30
                 ${MT_MPIRUN} -np 2 ${MT_DRIVER} fault)
add_test(NAME comm_mpi_fault_mismatch
         COMMAND ${MT_EXPECT} 1 "(all_reduce|broadcast) #1 on group world\\[0,1\\]: mismatched collective: rank . called (all_reduce\\(count 1000|broadcast\\(count 999), f32.*\\) but rank . called (all_reduce|broadcast)" 30
                 ${MT_MPIRUN} -np 2 ${MT_DRIVER} mismatch)
add_test(NAME comm_mpi_fault_mismatch_a2a
         COMMAND ${MT_EXPECT} 1 "all_to_all_v #0 on group world.*rank 1 sends 4 elements to rank 0, which expects 3" 30
                 ${MT_MPIRUN} -np 2 ${MT_DRIVER} mismatch-a2a)
add_test(NAME comm_mpi_fault_timeout
         COMMAND ${MT_EXPECT} 1 "rank 0: all_reduce #0 .*on group world\\[0,1\\]: no completion within 4 s" 30
                 ${MT_MPIRUN} -np 2 ${MT_DRIVER} timeout)
add_test(NAME comm_mpi_usage_all
         COMMAND ${MT_EXPECT} 2 "^meshtrain: error: bad value for --dp" 30
                 ${MT_MPIRUN} -np 2 ${MT_DRIVER} usage-all)
add_test(NAME comm_mpi_usage_one
         COMMAND ${MT_EXPECT} 2 "meshtrain: error: rank 1: rank-local bad input" 30
                 ${MT_MPIRUN} -np 2 ${MT_DRIVER} usage-one)
set_tests_properties(comm_mpi_fault_rank_throws comm_mpi_fault_mismatch
                     comm_mpi_fault_mismatch_a2a comm_mpi_fault_timeout
                     comm_mpi_usage_all comm_mpi_usage_one
                     PROPERTIES LABELS mpi TIMEOUT 45 ENVIRONMENT "${MT_MPI_ENV}")
set_property(TEST comm_mpi_fault_mismatch comm_mpi_fault_mismatch_a2a APPEND PROPERTY ENVIRONMENT
             MESHTRAIN_CHECK_COLLECTIVES=1)
