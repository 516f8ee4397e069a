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
add_test(NAME cli_mpirun_experts_tp_rows
         COMMAND ${MT_EXPECT} 2 "^meshtrain: error: --experts with --tp 2 splits each microbatch's 7 token rows" 60
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> train --backend mpi --tp 2 --experts 4 --batch 1 --seq 7 --steps 1 --quiet)
set_tests_properties(cli_mpirun_world_mismatch cli_mpirun_experts_tp_rows
                     PROPERTIES LABELS mpi ENVIRONMENT "${MT_MPI_ENV};EXPECT_ERROR_LINES=1" TIMEOUT 90)

# A usage error under mpirun is printed exactly once in every launch (issue #26): before,
# only process 0 printed, and mpirun, ending the job when another process exited 2 first,
# sometimes killed it before it had (4-14 of 60 launches). Many launches each:
#   - a flag CLI11 refuses (cli_main: process 0 prints, the others exit 0 silently);
#   - a rule of the options (every process agrees in MPI before any exits), flat and hybrid;
#   - an error only one process finds (an MPMD launch gives process 1 alone a bad
#     MESHTRAIN_FAULT): that process prints it, naming itself, and nothing hangs.
# The count is the test, and launches are its cost (a hybrid one ~1.3 s): the default suite
# launches each case enough times to catch a race of the old rate (4-14 of 60) more often
# than not; MESHTRAIN_FULL_TESTS=1 adds the long counts (_many) that made the issue's case.
set(MT_USAGE_ONCE ${CMAKE_SOURCE_DIR}/tests/comm_mpi/usage_error_once.sh)
set(MT_USAGE_TRAIN train --backend mpi --layers 1 --dim 16 --heads 2 --seq 8 --batch 4 --steps 2
                   --quiet)
# usage_error_once(NAME RUNS FULL_RUNS PATTERN mpirun-args...)
function(usage_error_once name runs full_runs pattern)
  set(entries cli_mpirun_usage_error_once_${name})
  add_test(NAME cli_mpirun_usage_error_once_${name}
           COMMAND ${MT_USAGE_ONCE} ${runs} "${pattern}" ${ARGN})
  set_tests_properties(cli_mpirun_usage_error_once_${name}
                       PROPERTIES ENVIRONMENT "${MT_MPI_ENV}" TIMEOUT 600 LABELS "mpi")
  if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1" AND full_runs GREATER runs)
    add_test(NAME cli_mpirun_usage_error_once_${name}_many
             COMMAND ${MT_USAGE_ONCE} ${full_runs} "${pattern}" ${ARGN})
    set_tests_properties(cli_mpirun_usage_error_once_${name}_many
                         PROPERTIES ENVIRONMENT "${MT_MPI_ENV}" TIMEOUT 900 LABELS "mpi")
  endif()
endfunction()
usage_error_once(bad_flag 12 40 "^meshtrain: error: unknown option --bogus-flag"
                 ${MT_MPIRUN} -np 4 $<TARGET_FILE:meshtrain> ${MT_USAGE_TRAIN} --dp 4 --bogus-flag)
usage_error_once(rule 12 30 "^meshtrain: error: --steps must be"
                 ${MT_MPIRUN} -np 4 $<TARGET_FILE:meshtrain> ${MT_USAGE_TRAIN} --dp 4 --steps -1)
usage_error_once(hybrid 8 20 "^meshtrain: error: --lr must be"
                 ${MT_MPIRUN} -np 2 $<TARGET_FILE:meshtrain> ${MT_USAGE_TRAIN} --dp 4
                 --ranks-per-process 2 --lr -1)
usage_error_once(one_process 5 5
                 "^meshtrain: error: MPI process 1: MESHTRAIN_FAULT='bogus' is not of the form"
                 ${MT_MPIRUN} -np 1 $<TARGET_FILE:meshtrain> ${MT_USAGE_TRAIN} --dp 2
                 : -np 1 env MESHTRAIN_FAULT=bogus $<TARGET_FILE:meshtrain> ${MT_USAGE_TRAIN} --dp 2)
