#include "train/checkpoint/checkpointer.h"

#include "train/checkpoint/checkpoint_paths.h"
#include "train/checkpoint/global_checkpointer.h"
#include "train/checkpoint/sharded_checkpointer.h"
#include "train/checkpoint/sharded_load.h"

namespace mt {

namespace {

class NoCheckpoints : public Checkpointer {
 public:
  void save(int) override {}
  std::string finish(int) override { return ""; }
};

}  // namespace

std::unique_ptr<Checkpointer> make_checkpointer(Session& s, CommWorld& world) {
  const IoOptions& io = s.opts.io;
  if (io.save.empty()) return std::make_unique<NoCheckpoints>();
  if (io.checkpoint_format == CheckpointFormat::sharded)
    return std::make_unique<ShardedCheckpointer>(s, world);
  return std::make_unique<GlobalCheckpointer>(s);
}

void restore_session(Session& s) {
  const std::string& dir = s.opts.io.load;
  if (dir.empty()) return;
  if (loads_sharded(dir))
    load_sharded_session(s);
  else
    load_global_session(s);
}

}  // namespace mt
