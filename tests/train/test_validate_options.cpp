// validate_train_options as a pure function: the defaults pass, each broken rule is one
// UsageError naming the flag, and the launcher's size is compared with the layout.
#include "train/validate_options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util/usage_error.h"

namespace mt {
namespace {

// The message of the UsageError validate_train_options throws, or "" if it passes.
std::string usage_error(const TrainOptions& o, const LauncherInfo& launcher = {}) {
  return test_util::usage_error_of([&] { validate_train_options(o, launcher); });
}

LauncherInfo open_mpi(int size) {
  LauncherInfo l;
  l.name = "Open MPI";
  l.size = size;
  return l;
}

TEST(ValidateOptions, DefaultsAndCommonLayoutsPass) {
  EXPECT_EQ(usage_error(TrainOptions{}), "");
  TrainOptions given_peak;  // --peak-gflops skips the start-up measurement
  given_peak.optim.peak_gflops = 95.5;
  EXPECT_EQ(usage_error(given_peak), "");
  TrainOptions o;
  o.parallel.dp = 2;
  o.parallel.tp = 2;
  o.parallel.pp = 2;
  o.parallel.microbatches = 4;
  o.parallel.schedule = ScheduleKind::interleaved;
  o.parallel.virtual_stages = 2;
  o.parallel.stage_layers = "1,1,1,1";
  EXPECT_EQ(usage_error(o), "");
  TrainOptions moe;
  moe.model.experts = 4;
  moe.parallel.dp = 2;
  moe.parallel.ep = 2;
  moe.parallel.zero = 2;
  EXPECT_EQ(usage_error(moe), "");
  moe.optim.recompute = Recompute::selective;
  EXPECT_EQ(usage_error(moe), "");
  for (const auto& [name, mode] : recompute_names()) {
    o.optim.recompute = mode;
    EXPECT_EQ(usage_error(o), "") << name;
  }
  // pp 1 never builds a schedule: a schedule given for it would be ignored, so it is
  // refused (issue #26), naming both flags.
  TrainOptions no_pipe;
  no_pipe.parallel.schedule = ScheduleKind::interleaved;
  EXPECT_EQ(usage_error(no_pipe),
            "--schedule has no effect without --pp > 1: give --pp > 1 or drop --schedule");
}

struct BadCase {
  const char* what;
  std::function<void(TrainOptions&)> change;
  std::string message;  // a part of the expected message
};

TEST(ValidateOptions, EachBrokenRuleIsAUsageErrorNamingTheFlag) {
  const std::vector<BadCase> cases = {
      {"timeout", [](TrainOptions& o) { o.engine.timeout_s = 0; }, "--timeout must be > 0"},
      {"layers", [](TrainOptions& o) { o.model.layers = 0; }, "--layers must be >= 1"},
      {"positions",
       [](TrainOptions& o) {
         o.model.positions = 64;
         o.model.seq = 128;
       },
       "--seq 128 is longer than the position table (64 rows)"},
      {"heads | dim", [](TrainOptions& o) { o.model.heads = 3; }, "--heads 3 does not divide"},
      {"topk", [](TrainOptions& o) { o.model.experts = 2, o.model.topk = 3; }, "--topk must be"},
      {"lr", [](TrainOptions& o) { o.optim.lr = 0; }, "--lr must be > 0"},
      {"threads", [](TrainOptions& o) { o.optim.threads = 0; }, "--threads must be in 1.."},
      {"peak gflops", [](TrainOptions& o) { o.optim.peak_gflops = -1; },
       "--peak-gflops must be > 0 (GFLOP/s per thread), or 0 to measure at start-up (got -1)"},
      {"peak gflops nan", [](TrainOptions& o) { o.optim.peak_gflops = std::nan(""); },
       "--peak-gflops must be > 0"},
      {"dp", [](TrainOptions& o) { o.parallel.dp = 0; }, "--dp must be >= 1 (got 0)"},
      {"zero", [](TrainOptions& o) { o.parallel.zero = 4; }, "--zero must be 0, 1, 2 or 3"},
      {"local world", [](TrainOptions& o) { o.parallel.dp = 2048; }, "is more than the 1024"},
      {"batch split", [](TrainOptions& o) { o.parallel.microbatches = 3; },
       "--batch 8 must be divisible by --dp x --microbatches = 3"},
      {"tp | heads", [](TrainOptions& o) { o.parallel.tp = 8; }, "--tp 8 does not divide --heads"},
      {"sequence parallel",
       [](TrainOptions& o) {
         o.parallel.tp = 2, o.parallel.sequence_parallel = true;
         o.optim.batch = 1, o.model.seq = 7, o.model.heads = 2;
       },
       "--sequence-parallel needs the 7 token rows"},
      {"ep needs experts", [](TrainOptions& o) { o.parallel.dp = 2, o.parallel.ep = 2; },
       "--ep 2 needs --experts > 0"},
      {"ep | dp", [](TrainOptions& o) { o.model.experts = 4, o.parallel.ep = 2; },
       "--ep 2 must divide --dp 1"},
      {"ep | experts",
       [](TrainOptions& o) { o.model.experts = 3, o.parallel.dp = 2, o.parallel.ep = 2; },
       "--ep 2 must divide --experts 3"},
      {"experts with tp: token rows",
       [](TrainOptions& o) {
         o.model.experts = 4, o.parallel.tp = 2, o.optim.batch = 1, o.model.seq = 7;
       },
       "--experts with --tp 2 splits each microbatch's 7 token rows"},
      {"experts with tp: shared width",
       [](TrainOptions& o) {
         o.model.arch = Arch::llama, o.model.experts = 4, o.parallel.tp = 2;
         o.model.shared_experts = 1, o.model.expert_ffn_dim = 33;
       },
       "--tp 2 does not divide the shared experts' width"},
      {"llama MoE knob under gpt2",
       [](TrainOptions& o) { o.model.experts = 4, o.model.router = RouterScore::sigmoid; },
       "--router sigmoid is a --arch llama setting"},
      {"no MoE layer after the dense ones",
       [](TrainOptions& o) {
         o.model.arch = Arch::llama, o.model.experts = 4;
         o.model.first_dense_layers = o.model.layers;
       },
       "makes no block a mixture of experts"},
      {"interleaved chunks",
       [](TrainOptions& o) { o.parallel.pp = 2, o.parallel.schedule = ScheduleKind::interleaved; },
       "--schedule interleaved needs --virtual-stages >= 2"},
      {"interleaved microbatches",
       [](TrainOptions& o) {
         o.parallel.pp = 4, o.parallel.schedule = ScheduleKind::interleaved,
         o.parallel.virtual_stages = 2;
         o.parallel.microbatches = 2;
       },
       "needs --microbatches (2) to be a multiple of --pp (4)"},
      {"virtual stages without interleaved",
       [](TrainOptions& o) { o.parallel.pp = 2, o.parallel.virtual_stages = 2; },
       "--virtual-stages 2 applies only to --schedule interleaved"},
      {"stage layers", [](TrainOptions& o) { o.parallel.pp = 2, o.parallel.stage_layers = "1,2"; },
       "--stage-layers '1,2' sums to 3, not --layers (4)"},
      {"save every", [](TrainOptions& o) { o.io.save_every = -1; }, "--save-every must be >= 0"},
      {"load and init", [](TrainOptions& o) { o.io.load = "ck", o.io.init_from = "w.safetensors"; },
       "give one of --load DIR"},
  };
  for (const BadCase& c : cases) {
    TrainOptions o;
    c.change(o);
    const std::string msg = usage_error(o);
    EXPECT_NE(msg.find(c.message), std::string::npos)
        << c.what << ": expected '" << c.message << "' in '" << msg << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.what << ": " << msg;
  }
}

// Issue #26: a flag that configures something the run does not do was ignored without a
// word (--save-sync without --save). Each is refused naming both flags; with what it needs,
// the same setting passes.
struct DependentCase {
  const char* flag;
  std::function<void(TrainOptions&)> set, supply;
  std::string needs;
};

TEST(ValidateOptions, AFlagWithoutWhatItConfiguresIsRefused) {
  const std::vector<DependentCase> cases = {
      {"--save-sync",
       [](TrainOptions& o) {
         o.io.checkpoint_format = CheckpointFormat::sharded, o.io.save_sync = true;
       },
       [](TrainOptions& o) { o.io.save = "ck"; }, "--save DIR"},
      {"--save-every", [](TrainOptions& o) { o.io.save_every = 5; },
       [](TrainOptions& o) { o.io.save = "ck"; }, "--save DIR"},
      {"--checkpoint-format",
       [](TrainOptions& o) { o.io.checkpoint_format = CheckpointFormat::sharded; },
       [](TrainOptions& o) { o.io.save = "ck"; }, "--save DIR"},
      {"--report-every", [](TrainOptions& o) { o.io.report_every = 5; },
       [](TrainOptions& o) { o.io.metrics = "m.jsonl"; }, "--metrics FILE"},
      {"--export-dtype", [](TrainOptions& o) { o.io.export_dtype = Precision::bf16; },
       [](TrainOptions& o) { o.io.export_path = "w.safetensors"; },
       "--export FILE or --export-hf DIR"},
      {"--prompt", [](TrainOptions& o) { o.io.sample_prompt = "Once"; },
       [](TrainOptions& o) { o.io.sample_tokens = 5; }, "--sample-tokens N > 0"},
      {"--eval-batches", [](TrainOptions& o) { o.optim.eval_batches = 2; },
       [](TrainOptions& o) { o.optim.eval_every = 5; }, "--eval-every N > 0"},
      {"--outer-lr", [](TrainOptions& o) { o.parallel.dp = 2, o.parallel.outer_lr = 0.5; },
       [](TrainOptions& o) { o.parallel.dp_sync = dp_sync_from_flag("diloco:4"); },
       "--dp-sync diloco:H"},
      {"--outer-momentum",
       [](TrainOptions& o) { o.parallel.dp = 2, o.parallel.outer_momentum = 0.5; },
       [](TrainOptions& o) { o.parallel.dp_sync = dp_sync_from_flag("diloco:4"); },
       "--dp-sync diloco:H"},
      {"--topk", [](TrainOptions& o) { o.model.topk = 1; },
       [](TrainOptions& o) { o.model.experts = 4; }, "--experts E > 0"},
      {"--moe-every", [](TrainOptions& o) { o.model.moe_every = 2; },
       [](TrainOptions& o) { o.model.experts = 4; }, "--experts E > 0"},
      {"--capacity-factor", [](TrainOptions& o) { o.model.capacity_factor = 1.25f; },
       [](TrainOptions& o) { o.model.experts = 4; }, "--experts E > 0"},
      {"--aux-loss-coef", [](TrainOptions& o) { o.model.aux_loss_coef = 0.1f; },
       [](TrainOptions& o) { o.model.experts = 4; }, "--experts E > 0"},
      {"--router-bias-update", [](TrainOptions& o) { o.model.router_bias_update = 0.01f; },
       [](TrainOptions& o) { o.model.experts = 4; }, "--experts E > 0"},
      {"--schedule", [](TrainOptions& o) { o.parallel.schedule = ScheduleKind::gpipe; },
       [](TrainOptions& o) { o.parallel.pp = 2; }, "--pp > 1"},
      {"--virtual-stages", [](TrainOptions& o) { o.parallel.virtual_stages = 2; },
       [](TrainOptions& o) {
         o.parallel.pp = 2, o.parallel.schedule = ScheduleKind::interleaved,
         o.parallel.microbatches = 2;
       },
       "--pp > 1"},
      {"--stage-layers", [](TrainOptions& o) { o.parallel.stage_layers = "2,2"; },
       [](TrainOptions& o) { o.parallel.pp = 2; }, "--pp > 1"},
      {"--sequence-parallel", [](TrainOptions& o) { o.parallel.sequence_parallel = true; },
       [](TrainOptions& o) { o.parallel.tp = 2; }, "--tp > 1"},
  };
  for (const DependentCase& c : cases) {
    TrainOptions o;
    c.set(o);
    const std::string msg = usage_error(o);
    EXPECT_EQ(msg.rfind(str(c.flag, " has no effect without ", c.needs), 0), 0u)
        << c.flag << ": " << msg;
    const std::string tail = str(": give ", c.needs, " or drop ", c.flag);
    EXPECT_TRUE(msg.size() > tail.size() && msg.substr(msg.size() - tail.size()) == tail) << msg;
    c.supply(o);
    EXPECT_EQ(usage_error(o), "") << c.flag << " with " << c.needs;
  }
  // The one setting that changes nothing but is passed by scripts with either schedule: a
  // warning, not a refusal.
  TrainOptions constant;
  constant.optim.lr_schedule = LrKind::constant;
  constant.optim.min_lr = 0;
  EXPECT_EQ(usage_error(constant), "");
  ASSERT_EQ(option_warnings(constant).size(), 1u);
  EXPECT_NE(
      option_warnings(constant)[0].find("--min-lr 0 has no effect with --lr-schedule constant"),
      std::string::npos);
  EXPECT_TRUE(option_warnings(TrainOptions{}).empty());
}

// Issue #26: what several flags imply together must fit what the engine counts with; these
// were found inside the ranks (an internal check, exit 1) or not at all (an overflow).
TEST(ValidateOptions, ProductsOfFlagsFitWhatTheEngineCounts) {
  const std::vector<BadCase> cases = {
      {"model chunks",
       [](TrainOptions& o) {
         o.model.layers = 130, o.parallel.pp = 2, o.parallel.schedule = ScheduleKind::interleaved;
         o.parallel.virtual_stages = 65, o.parallel.microbatches = 2;
       },
       "--pp x --virtual-stages = 130 model chunks is more than the 128"},
      {"pipeline microbatches",
       [](TrainOptions& o) {
         o.parallel.pp = 2, o.parallel.microbatches = 65537, o.optim.batch = 65537;
       },
       "--microbatches 65537 is more than the 65536 a pipeline"},
      {"token rows", [](TrainOptions& o) { o.optim.batch = 1 << 20, o.model.seq = 1 << 20; },
       "a microbatch of batch / (dp x microbatches) x seq = 1099511627776 token rows"},
      {"parameters",
       [](TrainOptions& o) {
         o.model.dim = 65536, o.model.heads = 1, o.model.layers = 4096;
         o.model.experts = 4096, o.model.topk = 1;
       },
       "parameters, more than the 1125899906842624 meshtrain can count"},
      {"no MoE block",
       [](TrainOptions& o) { o.model.experts = 4, o.model.layers = 2, o.model.moe_every = 3; },
       "--moe-every 3 with --layers 2 makes no block a mixture of experts"},
      {"capacity", [](TrainOptions& o) { o.model.experts = 4, o.model.capacity_factor = 3e38f; },
       "gives each expert a capacity of"},
      {"world",
       [](TrainOptions& o) {
         o.engine.backend = Backend::mpi, o.parallel.dp = 2048, o.parallel.tp = 1024;
         o.model.heads = 1024, o.model.dim = 1024, o.optim.batch = 2048;
       },
       "--pp x --dp x --tp = 2097152 ranks is more than the 1048576 meshtrain supports"},
  };
  for (const BadCase& c : cases) {
    TrainOptions o;
    c.change(o);
    const std::string msg = usage_error(o);
    EXPECT_NE(msg.find(c.message), std::string::npos)
        << c.what << ": expected '" << c.message << "' in '" << msg << "'";
  }
  // At the bounds, accepted: 128 chunks, 65536 microbatches, a capacity of every token.
  TrainOptions edge;
  edge.model.layers = 128, edge.parallel.pp = 2, edge.parallel.schedule = ScheduleKind::interleaved;
  edge.parallel.virtual_stages = 64, edge.parallel.microbatches = 2;
  EXPECT_EQ(usage_error(edge), "");
  edge.parallel.microbatches = 65536, edge.optim.batch = 65536;
  EXPECT_EQ(usage_error(edge), "");
  TrainOptions moe;
  moe.model.experts = 4, moe.model.capacity_factor = 1e6f;
  EXPECT_EQ(usage_error(moe), "");
}

TEST(ValidateOptions, LauncherSizeMustMatchTheWorld) {
  TrainOptions o;
  // Several processes of a local-backend run would each run the whole job.
  EXPECT_NE(usage_error(o, open_mpi(2)).find("is one of 2 started by Open MPI"), std::string::npos);
  o.engine.backend = Backend::mpi;
  EXPECT_EQ(usage_error(o, open_mpi(1)), "");
  EXPECT_EQ(usage_error(o), "");  // no launcher known: the MPI world decides later
  o.parallel.dp = 2;
  EXPECT_EQ(usage_error(o, open_mpi(2)), "");
  EXPECT_EQ(usage_error(o, open_mpi(4)),
            "the layout needs --pp x --dp x --tp = 2 ranks but Open MPI started 4 processes (set "
            "mpirun -np 2 or change the layout)");
  // Beyond one process's threads is fine with one rank per process.
  o.parallel.dp = 2048;
  o.optim.batch = 2048;
  EXPECT_EQ(usage_error(o, open_mpi(2048)), "");
}

}  // namespace
}  // namespace mt
