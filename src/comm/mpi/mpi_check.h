// MT_MPI_CHECK: every MPI call goes through it, so an MPI error becomes a RuntimeError that
// says which call failed, why (MPI's own error string) and in what context (op, group).
// Our communicators use MPI_ERRORS_RETURN; without it MPI would abort before we could
// add any context.
#pragma once

#include <mpi.h>

#include <string>

#include "core/error.h"

namespace mt {

inline std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return str("MPI error ", code);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace mt

// Usage: MT_MPI_CHECK(MPI_Ibarrier(comm, &req), "barrier #", seq, " on group ", name);
#define MT_MPI_CHECK(call, ...)                                                                   \
  do {                                                                                            \
    int mt_mpi_rc_ = (call);                                                                      \
    if (mt_mpi_rc_ != MPI_SUCCESS)                                                                \
      throw ::mt::RuntimeError(::mt::str(#call " failed: ", ::mt::mpi_error_string(mt_mpi_rc_),   \
                                         " (", ##__VA_ARGS__, ") at ", __FILE__, ":", __LINE__)); \
  } while (0)
