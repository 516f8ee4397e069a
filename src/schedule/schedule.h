// The pipeline schedule IR: a schedule is data. For each stage (pp rank) it is the ordered
// list of actions that rank executes; an executor walks its own list, a validator proves the
// lists complete and deadlock-free, a simulator times them, a renderer draws them.
//
// Model chunks. With v virtual stages the model is cut into p*v chunks. The placement says
// which stage holds which: interleaved (Megatron's), model chunk k lives on stage k % p as
// its local chunk k / p (local chunk c of stage s holds model chunk c*p + s); without
// interleaving v = 1 and chunk is always 0. V-shaped (DualPipeV, v = 2): local chunk 0 of
// stage s is model chunk s (on the way down) and local chunk 1 is model chunk 2p-1-s (on the
// way back up), so stage 0 holds both the first model chunk and the last.
//
// Actions (mb = microbatch 0..m-1, chunk = the LOCAL chunk on this stage, 0..v-1):
//   F(mb, chunk)   forward of that chunk
//   B(mb, chunk)   backward w.r.t. the chunk's input ("input gradient"). When the schedule's
//                  split_backward is false, B is the whole backward (input and weight
//                  gradients, B+W fused) and no W actions appear.
//   W(mb, chunk)   backward w.r.t. the chunk's weights (split_backward only)
//   FB             F(mb, chunk) and B(b_microbatch, b_chunk) of another microbatch as one
//                  overlapped action (DualPipe's F&B): its transfers sit around it as for
//                  an F and a B; execution_order.h says how the halves and transfers run.
//   SEND_ACT / RECV_ACT    the activation leaving model chunk k for k+1 (peer = other stage)
//   SEND_GRAD / RECV_GRAD  the gradient leaving model chunk k for k-1
// For SEND_* the chunk is the local chunk that produced the tensor; for RECV_* the local
// chunk that will consume it. A message is identified by message_key(); every send has
// exactly one matching receive. Transfers between chunks on the same stage (p = 1) are
// local and have no send/recv.
//
// Execution semantics the validator and simulator model (and an executor must provide):
// sends are asynchronous (buffered: a send never waits for its receiver), a receive blocks
// until its matching message has arrived; messages are matched by key, not arrival order.
// Each RECV is placed immediately before the action that consumes it; an executor may post
// it earlier (irecv) to overlap the transfer with compute.
#pragma once

#include <string>
#include <vector>

#include "schedule/schedule_kind.h"

namespace mt {

enum class ActionKind { F, B, W, FB, SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD };

const char* action_kind_name(ActionKind k);
inline bool is_compute(ActionKind k) {
  return k == ActionKind::F || k == ActionKind::B || k == ActionKind::W || k == ActionKind::FB;
}
inline bool is_send(ActionKind k) {
  return k == ActionKind::SEND_ACT || k == ActionKind::SEND_GRAD;
}
inline bool is_recv(ActionKind k) {
  return k == ActionKind::RECV_ACT || k == ActionKind::RECV_GRAD;
}

struct Action {
  ActionKind kind = ActionKind::F;
  int microbatch = 0;  // of an FB: its forward half's
  int chunk = 0;       // local chunk on the executing stage (of an FB: the forward half's)
  int peer = -1;       // the other stage of a send/recv; -1 for compute
  int b_microbatch = -1, b_chunk = -1;  // an FB's backward half; -1 otherwise
  bool operator==(const Action&) const = default;
};

// The two halves of an FB, as the F and the B they stand for.
inline Action forward_half(const Action& fb) {
  return {ActionKind::F, fb.microbatch, fb.chunk, -1};
}
inline Action backward_half(const Action& fb) {
  return {ActionKind::B, fb.b_microbatch, fb.b_chunk, -1};
}

// e.g. "F3", "B3.1" (chunk 1), "F3&B0.1" (an FB), "SEND_ACT(3.0->2)"
std::string to_string(const Action& a);

enum class ChunkPlacement { interleaved, v_shape };

struct Schedule {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  std::string name;      // schedule_name(kind), for messages
  int stages = 1;        // p
  int microbatches = 1;  // m
  int chunks = 1;        // v, local chunks (virtual stages) per stage
  bool split_backward = false;
  ChunkPlacement placement = ChunkPlacement::interleaved;
  std::vector<std::vector<Action>> actions;  // actions[stage], in execution order

  int model_chunks() const { return stages * chunks; }
  // For model chunks 0 .. model_chunks()-1 only.
  int model_chunk(int stage, int chunk) const {
    if (placement == ChunkPlacement::v_shape) return chunk == 0 ? stage : 2 * stages - 1 - stage;
    return chunk * stages + stage;
  }
  int stage_of(int model_chunk) const {
    if (placement == ChunkPlacement::v_shape)
      return model_chunk < stages ? model_chunk : 2 * stages - 1 - model_chunk;
    return model_chunk % stages;
  }
  int local_chunk_of(int model_chunk) const {
    if (placement == ChunkPlacement::v_shape) return model_chunk < stages ? 0 : 1;
    return model_chunk / stages;
  }
};

// The placement a schedule of this kind uses (v_shape for dualpipev).
ChunkPlacement placement_of(ScheduleKind schedule);
// Local chunks per stage that the schedule runs: 2 for dualpipev, whatever --virtual-stages
// says otherwise (check_schedule_args keeps the two consistent).
int chunks_per_stage(ScheduleKind schedule, int virtual_stages);

// Identifies the tensor a send/recv carries: (is_grad, microbatch, destination model chunk).
struct MessageKey {
  bool grad = false;
  int microbatch = 0;
  int dest_model_chunk = 0;
  auto operator<=>(const MessageKey&) const = default;
};
MessageKey message_key(const Schedule& s, int stage, const Action& a);

// The generators: pure functions of (p, m[, v]); each throws UsageError for sizes < 1.
Schedule schedule_gpipe(int stages, int microbatches);
Schedule schedule_1f1b(int stages, int microbatches);
Schedule schedule_interleaved(int stages, int microbatches, int virtual_stages);
Schedule schedule_zb_h1(int stages, int microbatches);
Schedule schedule_dualpipev(int stages, int microbatches);  // needs microbatches >= 2 stages

// The schedule names (gpipe, 1f1b, interleaved, zb-h1, dualpipev) of schedule_kinds(), in the
// order messages and --help show them.
std::vector<std::string> schedule_names();
// The names joined for a message or help text: ("|", "|") gives
// "gpipe|1f1b|interleaved|zb-h1|dualpipev", (", ", " or ") gives "gpipe, 1f1b, ... or dualpipev".
std::string schedule_names_joined(const std::string& sep, const std::string& last_sep);
// The rules make_schedule applies, without building anything, so that they can be checked
// before any rank starts: sizes >= 1, virtual_stages 1 except for interleaved,
// which needs >= 2 and microbatches % stages == 0, and dualpipev, which runs 2 (given as 1,
// the default, or 2) and needs microbatches >= 2 * stages. UsageError naming the flag to
// change (--pp, --microbatches, --schedule, --virtual-stages).
void check_schedule_args(ScheduleKind kind, int stages, int microbatches, int virtual_stages);
// check_schedule_args first.
Schedule make_schedule(ScheduleKind kind, int stages, int microbatches, int virtual_stages);
// The same by a name the user gave (schedule_kind(name): an unknown one is a UsageError).
void check_schedule_args(const std::string& name, int stages, int microbatches, int virtual_stages);
Schedule make_schedule(const std::string& name, int stages, int microbatches, int virtual_stages);

// Appends a compute action together with the transfers around it: the receive of its
// input before it and the send of its output after it (only across stages). The
// generators are written in terms of these, so their phases read as F/B/W only.
class ScheduleBuilder {
 public:
  ScheduleBuilder(ScheduleKind kind, int stages, int microbatches, int chunks, bool split,
                  ChunkPlacement placement = ChunkPlacement::interleaved);
  void forward(int stage, int mb, int chunk);
  void backward(int stage, int mb, int chunk);  // B (input grad, or full backward if fused)
  void weight(int stage, int mb, int chunk);    // W
  // An FB: F(f_mb, f_chunk) overlapped with B(b_mb, b_chunk). Receives of both halves
  // before it (the F half's first), sends of both after it (the F half's first).
  void forward_backward(int stage, int f_mb, int f_chunk, int b_mb, int b_chunk);
  Schedule take() { return std::move(s_); }

 private:
  // The receive of an F's (or a B's) input and the send of its output, when they cross stages.
  void receive_input(int stage, ActionKind compute, int mb, int chunk);
  void send_output(int stage, ActionKind compute, int mb, int chunk);
  Schedule s_;
};

}  // namespace mt
