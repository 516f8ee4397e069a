// A session's sharded checkpoints (--checkpoint-format sharded, docs/checkpoints.md):
// every rank writes only the elements it owns, in parallel, into --save DIR/step_NNNNNN;
// rank 0 writes the manifest last and renames the directory into place. (The load, which
// reshards, is sharded_load.h's.)
//
// Who writes an element: the rank that updates it (DataParallel::update_pieces: its ZeRO
// chunk, or everything at ZeRO 0), deduplicated where several ranks update the same
// element: ZeRO 0 -> dp index 0; a tensor replicated over tp -> tp index 0; the last
// pipeline stage's copy of the tied wte -> never (stage 0 writes it); an expert held by
// several ep replicas -> ep_replica rank 0. Rank 0 checks before publishing that the
// pieces tile every tensor exactly once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/world.h"
#include "train/checkpoint/checkpointer.h"
#include "train/checkpoint/manifest.h"
#include "train/checkpoint/retention.h"
#include "train/checkpoint/shard_writer.h"
#include "train/session.h"

namespace mt {

class ShardedCheckpointer : public Checkpointer {
 public:
  // Collective over the world: makes the writer's own communicator (its collectives run on
  // the background thread, beside the training thread's) and plans what this rank writes.
  // Rank 0 reads the --save directory's checkpoint log, decides which run it saves as
  // (checkpoint/retention.h) and removes marked temporaries of interrupted saves.
  ShardedCheckpointer(Session& s, CommWorld& world);
  ~ShardedCheckpointer() override;

  // Saves the state after `step`: waits for the previous save (throws its failure), copies
  // this rank's elements to the staging buffer and writes them on the background thread
  // (on this thread with --save-sync). Collective over the world.
  void save(int step) override;
  // Throws RuntimeError if a background save has finished and failed (the message names
  // the file); cheap, call once per step.
  void check() override;
  // Saves `last_step`, waits for the save in flight and throws its failure; returns how
  // long the saves held the training thread (staging, waiting, and writing when
  // --save-sync), unless --quiet.
  std::string finish(int last_step) override;

 private:
  struct Piece;
  std::string write_job(int step, int64_t data_position,
                        const std::vector<ManifestSegment>& segments, const std::string& tmp,
                        const std::string& final_dir);
  std::string publish(int step, int64_t data_position, const std::vector<std::string>& reports,
                      const std::string& tmp, const std::string& final_dir);
  void throw_if_failed(const std::string& result);

  Session& s_;
  std::shared_ptr<Communicator> comm_;
  std::vector<Piece> pieces_;
  size_t staged_floats_ = 0;  // params + both moments of the pieces (biases come on top)
  std::vector<float> staging_;
  std::vector<ManifestSegment> segments_;           // of the staged data (file index unset)
  std::vector<std::string> bias_names_;             // rank 0: the whole model's router biases
  std::unique_ptr<CheckpointRetention> retention_;  // rank 0: the log and --keep-checkpoints
  BackgroundWriter writer_;
  double stall_s_ = 0, longest_stall_s_ = 0;
  int saves_ = 0;
};

}  // namespace mt
