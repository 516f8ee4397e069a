# Data safety under mpirun (issue #17). MT_MPIRUN, MT_MPI_ENV and MT_EXPECT come from
# comm_mpi.cmake, included before this file (fragments are included in name order).
if(NOT DEFINED MT_MPIRUN)
  message(FATAL_ERROR "data_safety_mpi.cmake needs comm_mpi.cmake's MT_MPIRUN")
endif()

# A local-backend run started by mpirun would run the whole job once per process, every
# process writing the same files: refused, with the fix, printed once.
add_test(NAME cli_mpirun_needs_backend_mpi
         COMMAND ${MT_EXPECT} 2 "is one of 2 started by Open MPI.*add --backend mpi" 60
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> train --steps 1 --quiet)
# Every process parses the same command line: its usage error is printed once, not twice.
add_test(NAME cli_mpirun_usage_error_once
         COMMAND ${MT_EXPECT} 2 "^meshtrain: error: --lr must be a finite number" 60
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> train --backend mpi --lr inf)
set_tests_properties(cli_mpirun_needs_backend_mpi cli_mpirun_usage_error_once
                     PROPERTIES LABELS mpi ENVIRONMENT "${MT_MPI_ENV};EXPECT_ERROR_LINES=1" TIMEOUT 90)
