// Command-line entry point: parses, then calls into train/ (no logic of its own).
#pragma once

namespace mt {

// Returns the process exit code: 0 ok, 2 bad usage/config/input, 1 failure while running.
int cli_main(int argc, char** argv);

}  // namespace mt
