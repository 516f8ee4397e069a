// How a run saves and restores its training state, whatever the format (docs/checkpoints.md):
//   global   rank 0 gathers the whole model and replaces --save DIR (global_checkpoint.h)
//   sharded  every rank writes what it owns into --save DIR/step_NNNNNN, in the background,
//            and rank 0 publishes the manifest (sharded_checkpointer.h)
// --checkpoint-format chooses the saver once, here; the format of --load DIR is read from the
// directory itself (either loads into any layout). The trainer and the session see only
// this interface, so neither branches on the format.
#pragma once

#include <memory>
#include <string>

#include "comm/world.h"
#include "train/session.h"

namespace mt {

class Checkpointer {
 public:
  virtual ~Checkpointer() = default;
  // Saves the state after `step`. Collective over the world.
  virtual void save(int step) = 0;
  // Throws RuntimeError when an earlier save has failed (a background save); cheap, once
  // per step.
  virtual void check() {}
  // After the last step: saves it and waits for every save. Returns a line for the run's
  // log ("" for none). Collective over the world.
  virtual std::string finish(int last_step) = 0;
};

// The saver of --checkpoint-format; one that saves nothing without --save. Collective over
// the world (a sharded saver makes its communicator and reads the --save directory's log).
std::unique_ptr<Checkpointer> make_checkpointer(Session& s, CommWorld& world);

// Restores --load DIR into the session, in the format the directory holds: weights, both
// AdamW moments, router biases, data position, and s.start_step. No-op without --load.
// Collective over the world.
void restore_session(Session& s);

}  // namespace mt
