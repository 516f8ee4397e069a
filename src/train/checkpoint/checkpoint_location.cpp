#include "train/checkpoint/checkpoint_location.h"

#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/file_checks.h"
#include "train/checkpoint/checkpoint_dir.h"

namespace fs = std::filesystem;

namespace mt {

std::string resolve_checkpoint_dir(const std::string& where, const std::string& dir) {
  require_input_dir(where, dir);
  bool tmp = false;
  const std::string name = fs::path(strip_trailing_slashes(dir)).filename().string();
  // A step folder, complete or not, is that checkpoint: verification says what is wrong.
  if (file_id(dir + "/state.json") || is_sharded_checkpoint(dir) ||
      parse_step_dir_name(name, &tmp) >= 0)
    return dir;
  const std::vector<std::string> steps = complete_checkpoints(dir);
  MT_REQUIRE(!steps.empty(), where, " ", dir,
             " is not a checkpoint: it holds no state.json (a global checkpoint), no "
             "manifest.json (a sharded step folder) and no complete step_NNNNNN folders (a run "
             "folder of sharded checkpoints)");
  return steps.front();
}

}  // namespace mt
