// Runs the built meshtrain binary as a user would and captures what it printed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util/temp_dir.h"

namespace mt::testing {

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

using test_util::TempDir;

// A case whose ctest entry is labelled unit must not start the binary (tests/CMakeLists.txt
// sets MESHTRAIN_TEST_LABEL): it fails, naming the fix, instead of slowing `ctest -L unit`.
inline void expect_binary_allowed() {
  const char* label = std::getenv("MESHTRAIN_TEST_LABEL");
  if (label && std::string(label) == "unit")
    ADD_FAILURE() << "this case runs the meshtrain binary, but its ctest entry is labelled "
                     "unit: label it binary in tests/CMakeLists.txt (meshtrain_tests)";
}

// Runs a shell command line (quote its words yourself) with stdin closed, capturing stdout
// and stderr.
inline RunResult run_command(const std::string& command, const std::string& cwd = "") {
  if (command.find(MESHTRAIN_BIN) != std::string::npos) expect_binary_allowed();
  TempDir io;
  std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + command + " >" + (io / "out") +
                    " 2>" + (io / "err") + " </dev/null";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(io / "out");
  r.err = slurp(io / "err");
  return r;
}

// args are passed through the shell (quote them yourself when they hold spaces).
inline RunResult run_meshtrain(const std::string& args, const std::string& cwd = "") {
  expect_binary_allowed();
  return run_command(std::string(MESHTRAIN_BIN) + " " + args, cwd);
}

}  // namespace mt::testing
