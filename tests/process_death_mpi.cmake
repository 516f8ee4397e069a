# A process of an MPI job killed by SIGKILL (issue #26): the surviving processes print one
# meshtrain line naming the ranks the dead process ran and its MPI process, and end
# (comm/mpi/peer_watch.h). mpirun used to end such a job with its own text only ("process
# rank 1 ... exited on signal 9"), which names the MPI process, not the meshtrain ranks 2
# and 3 it held. "alone": mpirun --enable-recovery leaves the survivors running, and each
# must exit 1 by itself well before the run's --timeout 600 could end it. Uses MT_MPIRUN and
# MT_MPI_ENV from comm_mpi.cmake (fragments are included in name order).
set(MT_KILL ${CMAKE_SOURCE_DIR}/tests/comm_mpi/kill_process.sh)
set(MT_KILL_RUN train --backend mpi --layers 1 --dim 32 --heads 2 --seq 16 --steps 1000000
                --quiet --timeout 600)
add_test(NAME mpi_killed_hybrid_process_named
         COMMAND ${MT_KILL} launcher 1 "^meshtrain: error: ranks 2, 3 \\(MPI process 1\\) died"
                 $<TARGET_FILE:meshtrain> ${MT_MPIRUN} -np 2 --
                 ${MT_KILL_RUN} --ranks-per-process 2 --dp 4 --batch 8)
add_test(NAME mpi_killed_hybrid_process_survivors_exit_1
         COMMAND ${MT_KILL} alone 1 "^meshtrain: error: ranks 2, 3 \\(MPI process 1\\) died"
                 $<TARGET_FILE:meshtrain> ${MT_MPIRUN} -np 3 --
                 ${MT_KILL_RUN} --ranks-per-process 2 --dp 6 --batch 12)
# Process 0 watches the others; its own death is reported by process 1.
add_test(NAME mpi_killed_process_0_named
         COMMAND ${MT_KILL} alone 0 "^meshtrain: error: ranks 0, 1 \\(MPI process 0\\) died"
                 $<TARGET_FILE:meshtrain> ${MT_MPIRUN} -np 3 --
                 ${MT_KILL_RUN} --ranks-per-process 2 --dp 6 --batch 12)
# The plain MPI backend had the same gap.
add_test(NAME mpi_killed_process_named
         COMMAND ${MT_KILL} launcher 1 "^meshtrain: error: rank 1 \\(MPI process 1\\) died"
                 $<TARGET_FILE:meshtrain> ${MT_MPIRUN} -np 2 -- ${MT_KILL_RUN} --dp 2 --batch 8)
set_tests_properties(mpi_killed_hybrid_process_named mpi_killed_hybrid_process_survivors_exit_1
                     mpi_killed_process_0_named mpi_killed_process_named
                     PROPERTIES ENVIRONMENT "${MT_MPI_ENV}" TIMEOUT 180 LABELS "mpi")

# A process that ends on purpose, after its own error line, is no death: an injected fault
# (exit(1) in the MPI backend, docs/contracts.md §8) and a rank's failure (MPI_Abort) end with
# that one line.
add_test(NAME mpi_fault_exit_is_no_death
         COMMAND ${MT_EXPECT} 1 "^meshtrain: error: rank 1: injected fault at step 2" 120
                 ${MT_MPIRUN} -np 3 $<TARGET_FILE:meshtrain> train --backend mpi --layers 1
                 --dim 32 --heads 2 --seq 16 --batch 6 --dp 3 --steps 4 --quiet)
add_test(NAME mpi_hybrid_fault_abort_is_no_death
         COMMAND ${MT_EXPECT} 1 "^meshtrain: error: rank 3: injected fault at step 2" 120
                 ${MT_MPIRUN} -np 3 $<TARGET_FILE:meshtrain> train --backend mpi
                 --ranks-per-process 2 --layers 1 --dim 32 --heads 2 --seq 16 --batch 6 --dp 6
                 --steps 4 --quiet)
set_tests_properties(mpi_fault_exit_is_no_death mpi_hybrid_fault_abort_is_no_death PROPERTIES
                     ENVIRONMENT "${MT_MPI_ENV};EXPECT_ERROR_LINES=1;EXPECT_NO_MATCH=died"
                     TIMEOUT 150 LABELS "mpi")
set_property(TEST mpi_fault_exit_is_no_death APPEND PROPERTY ENVIRONMENT
             MESHTRAIN_FAULT=rank:1:step:2)
set_property(TEST mpi_hybrid_fault_abort_is_no_death APPEND PROPERTY ENVIRONMENT
             MESHTRAIN_FAULT=rank:3:step:2)
