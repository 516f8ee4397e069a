// `meshtrain schedule`: print a pipeline schedule as an ASCII timeline with its bubble, and
// optionally draw it as SVG; no training. The logic lives in parallel/pipeline/.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "schedule/schedule.h"
#include "schedule/schedule_report.h"

namespace mt {

CommandRunner add_schedule_command(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "schedule", "print a pipeline schedule (ASCII timeline, bubble, optional SVG)");
  cmd->add_option("--schedule", a->schedule, schedule_names_joined("|", "|"))
      ->capture_default_str();
  cmd->add_option("--pp", a->pp, "pipeline stages")->capture_default_str();
  cmd->add_option("--microbatches", a->microbatches, "microbatches per step")
      ->capture_default_str();
  cmd->add_option("--virtual-stages", a->virtual_stages,
                  "chunks per stage (interleaved: default 2; dualpipev: 2; 1 otherwise)");
  cmd->add_option("--costs", a->costs, "cost of one F,B,W action (B+W fused if not split)")
      ->capture_default_str();
  cmd->add_option("--latency", a->latency, "time from a send to its receive, in cost units")
      ->capture_default_str();
  cmd->add_option("--fb-overlap", a->fb_overlap,
                  "fraction of an F&B pair's shorter half run at once with the other (0: this "
                  "engine, the halves in turn; 1: F&B = max(F, B))")
      ->capture_default_str();
  cmd->add_option("--svg", a->svg, "also write the timeline as an SVG picture to FILE");
  return [a]() { return run_schedule_command(*a, std::cout); };
}

}  // namespace mt
