// Ending an MPI job from any thread: one error line, then MPI_Abort, once per process.
//
// Open MPI's MPI_Abort returns at once to every caller after the first in a process (a
// guard against recursion). In a hybrid process two rank threads can fail together (both
// time out in the same collective); the second used to fall through to std::abort(), and
// the job ended with SIGABRT (exit 134) instead of the code asked for. The first caller
// here prints and aborts; later callers wait for the process to be ended by it, and a
// returning MPI_Abort ends the process with the code itself.
#pragma once

#include <string>

namespace mt {

[[noreturn]] void mpi_abort_once(const std::string& line, int code);

}  // namespace mt
