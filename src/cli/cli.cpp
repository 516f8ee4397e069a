#include "cli/cli.h"

#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/parse_error_message.h"
#include "core/error.h"
#include "core/launcher.h"

namespace mt {

namespace {

// Under a launcher every process parses the same command line and finds the same usage
// error. The launcher ends the whole job when one process exits non-zero, possibly before
// another has printed: so the first process prints and exits 2, and the others exit 0
// without a word, which ends no job. (An MPI run agrees in MPI instead on errors that may
// differ between processes: comm/mpi/launch_agreement.h.)
int report(const char* what, int code) {
  const LauncherInfo launcher = launcher_from_env();
  if (code == 2 && launcher.size > 1 && launcher.rank != 0) return 0;
  std::fprintf(stderr, "meshtrain: error: %s\n", what);
  return code;
}

// CLI11 reports a word that names no command as "A subcommand is required"; docs/contracts.md §5
// asks for an error that names it. Empty when argv[1] is a flag or a known command.
std::string unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    if (sub->get_name() == argv[1]) return "";
  return unknown_command_message(app, argv[1]);
}

}  // namespace

int cli_main(int argc, char** argv) {
  CLI::App app{
      "meshtrain: train GPT models across many workers (data, tensor, pipeline and "
      "expert parallelism), ranks as threads or MPI processes.",
      "meshtrain"};
  app.set_version_flag("--version", std::string("meshtrain ") + MESHTRAIN_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Run 'meshtrain COMMAND --help' for the flags of a command.\n"
      "Exit codes: 0 success, 2 bad usage/config/input, 1 failure while running.");
  CommandRunner train = add_train_command(app, &argc, &argv);
  CommandRunner sample = add_sample_command(app);
  CommandRunner bench = add_bench_command(app, &argc, &argv);
  CommandRunner schedule = add_schedule_command(app);
  CommandRunner plan = add_plan_command(app);
  CommandRunner prepare = add_prepare_command(app);
  CommandRunner report_cmd = add_report_command(app);
  CommandRunner checkpoint = add_checkpoint_command(app);
  CommandRunner export_cmd = add_export_command(app);
  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty())
    return report(unknown.c_str(), 2);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return report(parse_error_message(app, e).c_str(), 2);
  } catch (const UsageError& e) {
    return report(e.what(), 2);
  }
  try {
    for (auto* sub : app.get_subcommands()) {
      if (sub->get_name() == "train") return train();
      if (sub->get_name() == "sample") return sample();
      if (sub->get_name() == "bench") return bench();
      if (sub->get_name() == "schedule") return schedule();
      if (sub->get_name() == "plan") return plan();
      if (sub->get_name() == "prepare") return prepare();
      if (sub->get_name() == "report") return report_cmd();
      if (sub->get_name() == "checkpoint") return checkpoint();
      if (sub->get_name() == "export") return export_cmd();
    }
    return report("no command given (see 'meshtrain --help')", 2);
  } catch (const UsageError& e) {
    return report(e.what(), 2);
  } catch (const RuntimeError& e) {
    return report(e.what(), 1);
  } catch (const std::bad_alloc&) {
    return report("out of memory (std::bad_alloc)", 1);
  } catch (const std::exception& e) {
    return report(e.what(), 1);
  }
}

}  // namespace mt
