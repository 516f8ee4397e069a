# The one validation pass (train/validate_options.h) under mpirun (issue #11). MT_MPIRUN,
# MT_MPI_ENV and MT_EXPECT come from comm_mpi.cmake, included before this file (fragments
# are included in name order).
if(NOT DEFINED MT_MPIRUN)
  message(FATAL_ERROR "validate_mpi.cmake needs comm_mpi.cmake's MT_MPIRUN")
endif()

# A layout that is not the launched world is refused from the launcher's environment,
# before MPI_Init, by every process, and printed once.
add_test(NAME cli_mpirun_world_mismatch
         COMMAND ${MT_EXPECT} 2
                 "^meshtrain: error: the layout needs --pp x --dp x --tp = 4 ranks but Open MPI started 2 processes" 60
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> train --backend mpi --dp 4 --steps 1 --quiet)
# A rule that used to fire inside the ranks (block.cpp, trainer.cpp) is found before them.
add_test(NAME cli_mpirun_experts_need_tp1
         COMMAND ${MT_EXPECT} 2 "^meshtrain: error: --experts needs --tp 1 for now \\(the experts" 60
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> train --backend mpi --tp 2 --experts 4 --steps 1 --quiet)
set_tests_properties(cli_mpirun_world_mismatch cli_mpirun_experts_need_tp1
                     PROPERTIES LABELS mpi ENVIRONMENT "${MT_MPI_ENV};EXPECT_ERROR_LINES=1" TIMEOUT 90)
