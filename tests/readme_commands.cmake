# The README's commands run verbatim on a fresh checkout (issue #31, item 3), at small sizes
# (tests/readme/readme_commands.py says how). The default suite runs the path of one's own
# text (prepare, train --data, report; about 10 s); MESHTRAIN_FULL_TESTS=1 runs every
# command of the block (about a minute on 2 shared cores), and the mpi label its mpirun lines.
set(MT_README_COMMANDS /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/readme/readme_commands.py
                       $<TARGET_FILE:meshtrain> ${CMAKE_SOURCE_DIR})
add_test(NAME readme_commands_own_text
         COMMAND ${MT_README_COMMANDS} --only "prepare|data/mine|report")
set_tests_properties(readme_commands_own_text PROPERTIES LABELS binary TIMEOUT 300)
add_test(NAME readme_commands_mpirun COMMAND ${MT_README_COMMANDS} --mpirun --only "^mpirun")
set_tests_properties(readme_commands_mpirun PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
if("$ENV{MESHTRAIN_FULL_TESTS}" STREQUAL "1")
  add_test(NAME readme_commands_all COMMAND ${MT_README_COMMANDS} --full)
  set_tests_properties(readme_commands_all PROPERTIES LABELS full TIMEOUT 900)
endif()
