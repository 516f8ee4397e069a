// Starting an MPI job, and a usage error found while starting it printed exactly once.
//
// Every process of an MPI run resolves and validates the options itself, before MPI is
// initialised (cli/train_setup.cpp). What depends only on the command line is found by all
// of them alike; what depends on what a process sees (its host's files, its memory) may be
// found by some only. The launcher ends the whole job as soon as one process exits
// non-zero, so the process that prints must print before any process exits: the
// processes meet in one collective, the first after MPI_Init (healthy ones in start_mpi,
// called by run_mpi and run_hybrid; failing ones in end_launch_with_usage_error), and agree
// on the lowest process that failed. It prints (the bare message when every process failed,
// else prefixed "MPI process P: "), then all pass a barrier, finalise MPI and exit 2.
#pragma once

#include <string>

namespace mt {

// Initialises MPI with MPI_THREAD_MULTIPLE and runs the launch agreement with no error of
// its own. Returns this process's rank of MPI_COMM_WORLD, or does not return when some
// process failed to start (exit 2, the line printed by one process) or this MPI lacks
// MPI_THREAD_MULTIPLE (exit 1).
int start_mpi(int* argc, char** argv[]);

// This process found `line` before its ranks started: initialises MPI and runs the launch
// agreement with it. Does not return (exit 2) when MPI's world is the launcher's; returns
// (MPI finalised) when it is not, e.g. a singleton started without the launcher's help,
// and the caller must report the error itself.
void end_launch_with_usage_error(int* argc, char** argv[], const std::string& line,
                                 int launcher_size);

}  // namespace mt
