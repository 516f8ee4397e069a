// `meshtrain schedule` logic: the printed timeline, the bubble line, the SVG and bad flags.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "schedule/schedule.h"
#include "schedule/schedule_report.h"

namespace mt {
namespace {

std::string run(const ScheduleArgs& a) {
  std::ostringstream os;
  EXPECT_EQ(run_schedule_command(a, os), 0);
  return os.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ScheduleReport, PrintsOneRowPerStageAndTheBubble) {
  ScheduleArgs a;
  a.schedule = "zb-h1";
  a.pp = 4;
  a.microbatches = 8;
  const std::string out = run(a);
  EXPECT_EQ(count(out, "\nstage "), 4) << out;
  // 4 stages x 3 idle units out of 4 x 27 (= 3*8 + 3)
  EXPECT_NE(out.find("\nbubble: 11.1%"), std::string::npos) << out;
  EXPECT_NE(out.find("stage  0 | F0 F1 F2 F3 .  .  .  B0 W0 F4"), std::string::npos) << out;
  EXPECT_EQ(count(out, "W7"), 4) << out;
}

TEST(ScheduleReport, ShowsTheClosedFormAndHonoursCosts) {
  ScheduleArgs a;
  a.schedule = "1f1b";
  a.pp = 2;
  a.microbatches = 2;
  a.costs = "1,2,1";
  const std::string out = run(a);
  // F=1, B+W=3: makespan 4*(2+1) = 12, idle per stage 1*4 -> 8 / 24
  EXPECT_NE(out.find("bubble: 33.3%"), std::string::npos) << out;
  EXPECT_NE(out.find("closed form (F = B = W): 33.3%"), std::string::npos) << out;
  EXPECT_NE(out.find("B0-----"), std::string::npos) << out;  // spans 3 cells
}

// A latency of 1e12 cost units made the text timeline 4e12 cells (minutes of output, found
// by a flag sweep). Past 4096 cells it is not drawn; the figures still are.
TEST(ScheduleReport, ALatencyFarBeyondTheCostsSkipsTheTextTimeline) {
  ScheduleArgs a;
  a.pp = 2;
  a.microbatches = 4;
  a.latency = 1e12;
  const std::string out = run(a);
  EXPECT_NE(out.find("(timeline not drawn: "), std::string::npos) << out;
  EXPECT_EQ(count(out, "\nstage "), 0) << out;
  EXPECT_NE(out.find("\nbubble: 100.0%"), std::string::npos) << out;
  a.latency = 1000;  // 4015 cells: still drawn
  EXPECT_EQ(count(run(a), "\nstage "), 2);
}

TEST(ScheduleReport, InterleavedDefaultsToTwoChunks) {
  ScheduleArgs a;
  a.schedule = "interleaved";
  a.pp = 2;
  a.microbatches = 4;
  const std::string out = run(a);
  EXPECT_NE(out.find("virtual stages 2"), std::string::npos) << out;
  EXPECT_NE(out.find("F0.1"), std::string::npos) << out;
  EXPECT_NE(out.find("bubble: 11.1%"), std::string::npos) << out;  // 1/(2*4+1)
}

// The V: two chunks per stage without --virtual-stages, F&B pairs drawn as their halves,
// memory in pairs and in stage-microbatches, and the DualPipe paper's figure for the costs.
TEST(ScheduleReport, DualPipeVShowsPairsMemoryAndThePapersFormula) {
  ScheduleArgs a;
  a.schedule = "dualpipev";
  a.pp = 4;
  a.microbatches = 8;
  const std::string out = run(a);
  EXPECT_NE(out.find("virtual stages 2"), std::string::npos) << out;
  EXPECT_EQ(count(out, "\nstage "), 4) << out;
  EXPECT_NE(out.find("F7.0& B3.1-"), std::string::npos) << out;  // stage 0's first pair
  EXPECT_NE(out.find("pairs per stage: 9 9 9 9 (a pair holds 1/2 of a stage's layers: about "
                     "4.5 4.5 4.5 4.5"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("\nbubble: 5.9%"), std::string::npos) << out;  // 3 / 51
  EXPECT_NE(out.find("F&B = 3 (the halves one after the other): 6 per stage, bubble 11.1%; "
                     "simulated idle 3"),
            std::string::npos)
      << out;
  a.fb_overlap = 1;
  const std::string overlapped = run(a);
  EXPECT_NE(overlapped.find("F&B overlap 1"), std::string::npos) << overlapped;
  EXPECT_NE(overlapped.find("F&B = 2 (halves overlapping by 1): 3 per stage"), std::string::npos)
      << overlapped;
  a.fb_overlap = 1.5;
  EXPECT_THROW(run_schedule_command(a, std::cout), UsageError);
}

TEST(ScheduleReport, DualPipeVSvgBordersEachPair) {
  ScheduleArgs a;
  a.schedule = "dualpipev";
  a.pp = 2;
  a.microbatches = 4;
  a.svg = ::testing::TempDir() + "/meshtrain_schedule_dualpipev.svg";
  const std::string out = run(a);
  std::ifstream f(a.svg);
  std::stringstream svg;
  svg << f.rdbuf();
  const std::string text = svg.str();
  std::remove(a.svg.c_str());
  int pairs = 0;
  for (const auto& list : schedule_dualpipev(2, 4).actions)
    for (const Action& x : list) pairs += x.kind == ActionKind::FB;
  EXPECT_GT(pairs, 0);
  EXPECT_NE(out.find("wrote "), std::string::npos);
  EXPECT_EQ(count(text, "stroke=\"black\""), pairs) << text;
  EXPECT_NE(text.find("black border: F&amp;B pair"), std::string::npos) << text;
}

TEST(ScheduleReport, WritesAnSvg) {
  ScheduleArgs a;
  a.schedule = "zb-h1";
  a.pp = 2;
  a.microbatches = 3;
  a.svg = ::testing::TempDir() + "/meshtrain_schedule_test.svg";
  run(a);
  std::ifstream f(a.svg);
  std::stringstream svg;
  svg << f.rdbuf();
  const std::string text = svg.str();
  std::remove(a.svg.c_str());
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  EXPECT_NE(text.find("zb-h1: p=2, m=3"), std::string::npos);
  // 2 stage backgrounds + 2 x 3 x (F, B, W) boxes + 4 legend swatches + the page
  EXPECT_EQ(count(text, "<rect"), 1 + 2 + 18 + 4) << text;
}

TEST(ScheduleReport, BadFlagsAreUsageErrorsNamingTheFlag) {
  auto fails_with = [](ScheduleArgs a, const std::string& flag) {
    std::ostringstream os;
    try {
      run_schedule_command(a, os);
      ADD_FAILURE() << "no error; expected one naming " << flag;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  ScheduleArgs a;
  a.costs = "1,1";
  fails_with(a, "--costs");
  a.costs = "1,x,1";
  fails_with(a, "--costs");
  a.costs = "0,1,1";
  fails_with(a, "--costs");
  a = ScheduleArgs{};
  a.pp = 0;
  fails_with(a, "--pp");
  a = ScheduleArgs{};
  a.microbatches = -1;
  fails_with(a, "--microbatches");
  a = ScheduleArgs{};
  a.schedule = "interleaved";
  a.microbatches = 6;
  fails_with(a, "--microbatches");
  a = ScheduleArgs{};
  a.virtual_stages = 2;
  fails_with(a, "--virtual-stages");
  a = ScheduleArgs{};
  a.schedule = "dualpipe";
  fails_with(a, "--schedule");
  a = ScheduleArgs{};
  a.latency = -1;
  fails_with(a, "--latency");
}

TEST(ScheduleReport, ParsesCosts) {
  const OpCosts c = parse_costs("1,2.5,0");
  EXPECT_EQ(c.forward, 1);
  EXPECT_EQ(c.backward, 2.5);
  EXPECT_EQ(c.weight, 0);
  EXPECT_THROW(parse_costs("1,2,3,4"), UsageError);
  EXPECT_THROW(parse_costs("1,,3"), UsageError);
  EXPECT_THROW(parse_costs("1,inf,3"), UsageError);
}

}  // namespace
}  // namespace mt
