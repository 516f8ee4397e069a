// Errors and checks shared by every layer.
//
// Two kinds of failure map to the two non-zero exit codes of docs/contracts.md §5:
//   UsageError   -> exit 2: bad flags, config, or input files ("meshtrain: error: ...")
//   RuntimeError -> exit 1: something failed while running (a rank, a timeout, I/O)
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mt {

// Concatenates its arguments with operator<< (g++ 12 has no std::format).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace mt

// MT_CHECK guards internal invariants (a failure is a bug or a runtime fault -> exit 1).
#define MT_CHECK(cond, ...)                                                                 \
  do {                                                                                      \
    if (!(cond))                                                                            \
      throw ::mt::RuntimeError(                                                             \
          ::mt::str(__FILE__, ":", __LINE__, ": check failed: " #cond " ", ##__VA_ARGS__)); \
  } while (0)

// MT_REQUIRE validates user input (a failure is the user's to fix -> exit 2).
#define MT_REQUIRE(cond, ...)                                    \
  do {                                                           \
    if (!(cond)) throw ::mt::UsageError(::mt::str(__VA_ARGS__)); \
  } while (0)
