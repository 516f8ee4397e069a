// The options' rules about --ranks-per-process (the hybrid world): it needs --backend mpi,
// divides the world, and the launcher's processes times K must equal the layout's ranks;
// and about --dp-sync (local SGD, DiLoCo).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "parallel/data_parallel/replica_sync.h"
#include "test_util/usage_error.h"
#include "train/validate_options.h"

namespace mt {
namespace {

TEST(ValidateOptions, RanksPerProcessRules) {
  auto error = [](const TrainOptions& o, const LauncherInfo& l = {}) {
    return test_util::usage_error_of([&] { validate_train_options(o, l); });
  };
  TrainOptions o;
  o.parallel.dp = 4;
  o.engine.ranks_per_process = 2;
  EXPECT_NE(error(o).find("needs --backend mpi"), std::string::npos);
  o.engine.backend = Backend::mpi;
  EXPECT_EQ(error(o), "");
  LauncherInfo two;
  two.name = "Open MPI";
  two.size = 2;
  EXPECT_EQ(error(o, two), "");
  two.size = 4;
  EXPECT_NE(error(o, two).find("set mpirun -np 2"), std::string::npos) << error(o, two);
  o.engine.ranks_per_process = 3;
  EXPECT_NE(error(o).find("does not divide the 4 ranks"), std::string::npos);
  o.engine.ranks_per_process = 0;
  EXPECT_NE(error(o).find("--ranks-per-process must be in 1.."), std::string::npos);
  // An uneven placement is refused before any rank starts, naming the group.
  TrainOptions uneven;
  uneven.engine.backend = Backend::mpi;
  uneven.parallel.dp = 3;
  uneven.parallel.tp = 2;
  uneven.engine.ranks_per_process = 3;
  uneven.optim.batch = 6;
  EXPECT_NE(error(uneven).find("dp[0,2,4]"), std::string::npos) << error(uneven);
}

// --dp-sync: the three forms, and what local SGD / DiLoCo do not compose with yet.
TEST(ValidateOptions, DpSyncRules) {
  auto error = [](const TrainOptions& o) -> std::string {
    try {
      validate_train_options(o);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  TrainOptions o;
  o.parallel.dp = 2;
  for (const char* ok : {"every-step", "local:1", "local:16", "diloco:4"}) {
    o.parallel.dp_sync = dp_sync_from_flag(ok);
    EXPECT_EQ(error(o), "") << ok;
  }
  try {
    dp_sync_from_flag("local:0");
    ADD_FAILURE() << "local:0 accepted";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "--dp-sync must be every-step, local:H or diloco:H with H >= 1 (got "
                 "'local:0')");
  }
  o.parallel.dp_sync = dp_sync_from_flag("local:4");
  o.parallel.zero = 1;
  EXPECT_NE(error(o).find("needs --zero 0"), std::string::npos);
  o.parallel.zero = 0;
  o.io.save = "/tmp/x";
  EXPECT_NE(error(o).find("--save/--load"), std::string::npos);
  o.io.save.clear();
  o.parallel.dp_sync = dp_sync_from_flag("diloco:4");
  o.parallel.outer_momentum = 1.0;
  EXPECT_NE(error(o).find("--outer-momentum in [0, 1)"), std::string::npos);
  o.parallel.outer_momentum = 0.9;
  o.model.experts = 4;
  EXPECT_NE(error(o).find("does not support --experts"), std::string::npos);
}

}  // namespace
}  // namespace mt
