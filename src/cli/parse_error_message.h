// The one line printed for a command line CLI11 refused, whatever the command.
//
// CLI11 lists unexpected words in reverse order ("The following arguments were not expected:
// 10 --step") and points at no help. Here the word is named first, with the nearest valid
// names of the command it was given to, and the pointer names that command's help:
//   unknown option --step; did you mean --steps? (see 'meshtrain train --help')
//   unknown command 'checkpoint verfy'; did you mean verify? (see 'meshtrain checkpoint --help')
// Other parse errors keep CLI11's text, with the same pointer.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace mt {

// After app.parse threw `e`.
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e);

// For a first word that names no command (argv[1]): "unknown command 'trian'; did you mean
// train? (commands: ...; see 'meshtrain --help')".
std::string unknown_command_message(const CLI::App& app, const std::string& word);

}  // namespace mt
