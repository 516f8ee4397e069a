// A session's global checkpoints (--checkpoint-format global, global_checkpoint.h): every
// save gathers the state to rank 0, which replaces --save DIR whole; a load reads the
// global tensors and each rank keeps its own elements, so any layout loads what any other
// saved.
#pragma once

#include <string>

#include "train/checkpoint/checkpointer.h"
#include "train/session.h"

namespace mt {

class GlobalCheckpointer : public Checkpointer {
 public:
  explicit GlobalCheckpointer(Session& s) : s_(s) {}
  // Writes --save DIR at `step`: weights, both AdamW moments, router biases, data
  // position. Collective over the world; the directory is complete when every rank returns.
  void save(int step) override;
  std::string finish(int last_step) override;

 private:
  Session& s_;
};

// Restores --load DIR (a global checkpoint) into the session and sets s.start_step.
// Collective over the world.
void load_global_session(Session& s);

}  // namespace mt
