# The hybrid world (--backend mpi --ranks-per-process 2 under mpirun -np 2: 2 processes x 2
# rank threads) against one worker, at the harness's tolerances (losses 1e-5 relative,
# exported weights 1e-4). Uses MT_EQUIV* from equivalence.cmake (included before this file).
set(MT_EQUIV_HYBRID "${MT_EQUIV_MPIRUN} -np 2 {bin}")
set(MT_HYB "--backend mpi --ranks-per-process 2")
# dp 4: the dp group spans both processes with 2 members in each (hierarchical
# all-reduce / reduce-scatter / all-gather); ZeRO 1 and 3.
add_test(NAME equivalence.hybrid_dp4
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE}
                 --launcher "${MT_EQUIV_HYBRID}"
                 --layout "${MT_HYB} --dp 4 --zero 1" --layout "${MT_HYB} --dp 4 --zero 3")
# dp 2 x tp 2: tp inside each process (local backend), dp across (one member per process);
# pp 2 x dp 2: each process is one stage, its dp group inside, pp across.
add_test(NAME equivalence.hybrid_tp_pp
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN} --base ${MT_EQUIV_BASE}
                 --launcher "${MT_EQUIV_HYBRID}"
                 --layout "${MT_HYB} --dp 2 --tp 2 --zero 1 --sequence-parallel"
                 --layout "${MT_HYB} --pp 2 --dp 2 --microbatches 2 --schedule 1f1b")
# Experts: ep 4 spans both processes (hierarchical all-to-all-v); ep 2 stays inside a process
# while its expert-replica group crosses.
add_test(NAME equivalence.hybrid_moe_ep
         COMMAND ${MT_EQUIV} compare --bin ${MT_EQUIV_BIN}
                 --base "${MT_EQUIV_MOE} --capacity-factor 1.25" --reference "--microbatches 4"
                 --launcher "${MT_EQUIV_HYBRID}"
                 --layout "${MT_HYB} --dp 4 --ep 4" --layout "${MT_HYB} --dp 4 --ep 2 --zero 1")
set_tests_properties(equivalence.hybrid_dp4 equivalence.hybrid_tp_pp equivalence.hybrid_moe_ep
                     PROPERTIES LABELS "mpi;hybrid" TIMEOUT 300)
