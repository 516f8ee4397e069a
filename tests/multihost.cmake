# A real multi-host run on one machine (scripts/multihost.sh): two network namespaces joined
# by veth links, one MPI process per namespace, TCP between them. Needs root; skipped (exit
# 77) with a message where namespaces cannot be created.
add_test(NAME multihost.equivalence_2ns
         COMMAND ${CMAKE_SOURCE_DIR}/tests/multihost/equivalence_2ns.sh ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:meshtrain>)
set_tests_properties(multihost.equivalence_2ns PROPERTIES LABELS "mpi;hybrid;multihost"
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
