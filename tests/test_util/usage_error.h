// The message of a refusal: what a test of bad input compares. A UsageError is the one-line
// `meshtrain: error: ...` the user sees, so tests check its wording, not just its type.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace mt::test_util {

// The message of the UsageError `fn` throws, "" when it accepts (so `EXPECT_EQ(..., "")`
// reads "accepted"). Any other exception escapes: it is a failure, not a refusal.
template <typename Fn>
std::string usage_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// The same for input that must be refused: accepting it fails the test here, naming `what`.
template <typename Fn>
std::string refusal_of(Fn&& fn, const std::string& what = "the input") {
  std::string message = usage_error_of(fn);
  if (message.empty()) ADD_FAILURE() << what << " was accepted (no UsageError)";
  return message;
}

}  // namespace mt::test_util
