// What a launcher's environment says about this process: Open MPI first, then PMIx, PMI,
// MVAPICH, and Slurm only inside an srun step (a batch script alone is one process).
#include "core/launcher.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace mt {
namespace {

LauncherInfo from(const std::map<std::string, std::string>& vars) {
  return launcher_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launcher, NoneWithoutVariables) {
  EXPECT_FALSE(from({}).launched());
  EXPECT_EQ(from({}).size, 1);
}

TEST(Launcher, OpenMpiWinsOverPmix) {
  const LauncherInfo l = from({{"OMPI_COMM_WORLD_RANK", "3"},
                               {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"PMIX_RANK", "0"}});
  EXPECT_EQ(l.name, "Open MPI");
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 2);
}

TEST(Launcher, SlurmStepFromSrun) {
  const LauncherInfo l = from({{"SLURM_PROCID", "5"},
                               {"SLURM_STEP_ID", "0"},
                               {"SLURM_NTASKS", "16"},  // the allocation's
                               {"SLURM_STEP_NUM_TASKS", "7"},
                               {"SLURM_LOCALID", "1"},
                               {"SLURM_NODEID", "2"},
                               {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"}});
  EXPECT_EQ(l.name, "Slurm");
  EXPECT_EQ(l.rank, 5);
  EXPECT_EQ(l.size, 7);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_size, 2);
}

// Inside an sbatch script but outside srun: one process (--backend local must not be
// refused as "one of 16 processes").
TEST(Launcher, SlurmBatchScriptIsNotALaunch) {
  const LauncherInfo l =
      from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "16"}, {"SLURM_JOB_ID", "9"}});
  EXPECT_FALSE(l.launched());
  EXPECT_EQ(l.size, 1);
}

TEST(Launcher, SlurmTasksPerNodeList) {
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 4), -1);
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("1,3", 1), 3);
  EXPECT_EQ(slurm_tasks_on_node("2(x", 0), -1);
  EXPECT_EQ(slurm_tasks_on_node("x", 0), -1);
}

TEST(Launcher, MalformedValuesAreIgnored) {
  EXPECT_FALSE(from({{"OMPI_COMM_WORLD_RANK", "-1"}}).launched());
  EXPECT_FALSE(from({{"PMI_RANK", "1x"}}).launched());
  const LauncherInfo l = from({{"PMI_RANK", "2"}, {"PMI_SIZE", "oops"}});
  EXPECT_EQ(l.size, 3);  // at least rank + 1
}

}  // namespace
}  // namespace mt
