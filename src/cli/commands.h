// The subcommands of `meshtrain`. Each adds itself to the app and returns the function to
// run when it was selected (which returns the exit code).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace mt {

using CommandRunner = std::function<int()>;

CommandRunner add_train_command(CLI::App& app, int* argc, char*** argv);
CommandRunner add_sample_command(CLI::App& app);
CommandRunner add_bench_command(CLI::App& app, int* argc, char*** argv);
CommandRunner add_schedule_command(CLI::App& app);
CommandRunner add_plan_command(CLI::App& app);
CommandRunner add_prepare_command(CLI::App& app);
CommandRunner add_report_command(CLI::App& app);
CommandRunner add_checkpoint_command(CLI::App& app);
CommandRunner add_export_command(CLI::App& app);

}  // namespace mt
