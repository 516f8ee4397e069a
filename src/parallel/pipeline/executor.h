// Runs one stage's action list (schedule.h) for one optimizer step: forwards, split or
// fused backwards, and the activation / gradient transfers between stages on the pp
// communicator.
//
// Messages. Every transfer is two asynchronous sends on the pp group: a header of eight
// int32 (magic, activation or gradient, microbatch, destination model chunk, b, T, rows,
// C), then the payload (rows x C floats). Both are tagged from (kind, destination model
// chunk, microbatch), so with pp = 2, where the previous and the next stage are the same
// rank, an activation and a gradient in flight between the pair can never be confused.
// The receiver checks the header before it touches the payload and throws RuntimeError
// naming both stages when it does not match what its schedule expects.
//
// Overlap. Receives are posted into landing buffers as soon as they come within
// `recv_lookahead` compute actions of the current one, so a transfer proceeds while the
// stage computes; outgoing tensors are copied into send buffers at the moment they are
// produced and sent asynchronously, so a send never holds an activation slot (the
// schedule's semantics: buffered sends, blocking receives). The copies are one
// (rows, C) tensor per message, small next to a chunk's compute. An FB (DualPipeV's F&B
// pair) runs in execution_order.h's order: its F half, the F half's send, then the wait
// for the B half's input gradient (posted before the F half, so it arrived meanwhile),
// then the B half: each half's transfer runs under the other half's compute. The two
// computations themselves run one after the other on the rank's compute threads.
//
// Memory. A (microbatch, chunk) acquires its activation slot at F and releases it after
// W, or after B when the backward is fused, so the peak number of live pairs is exactly
// what validate_schedule() predicts (1F1B: p - s on stage s; GPipe: m).
//
// Time. Busy = time inside F/B/W (including the boundary copies); the rest of the step —
// blocked in receives, waiting for the last sends, bookkeeping — is idle, and
// bubble = idle / step time.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/arena.h"
#include "model/model_chunk.h"
#include "schedule/execution_order.h"
#include "schedule/schedule.h"

namespace mt {

// Shape of one boundary tensor: a microbatch of b sequences of T tokens, C channels.
// row_split > 1 when each rank of a tensor-parallel group holds only b*T/row_split token
// rows of the residual stream (sequence parallelism).
struct PipelineShape {
  int b = 1, T = 1, C = 1;
  int row_split = 1;
  size_t rows() const { return size_t(b) * T / size_t(row_split); }
  size_t floats() const { return rows() * size_t(C); }
};

struct PipelineStepStats {
  double loss_sum = 0;      // summed token cross-entropy (last stage; 0 elsewhere)
  double step_seconds = 0;  // first action to the last send completed
  double busy_seconds = 0;  // inside F, B, W
  int peak_in_flight = 0;   // (microbatch, chunk) pairs holding activation slots at once
  // The bubble needs every rank's step: pipeline_bubble (pipeline_stage.h).
};

// Receives each action as it ends: name as in PyTorch's pipelining traces, with the
// model chunk (virtual stage) as the stage number — "1F3", "0B2", "0W2", "0SEND_F3",
// "1RECV_F3", "1SEND_B2", "0RECV_B2" — category "compute" or "comm", and [begin, end) in
// seconds on the steady clock (core/timer.h). Trace::add has this signature.
using PipelineEventSink =
    std::function<void(const std::string& name, const char* cat, double begin, double end)>;

class PipelineExecutor {
 public:
  // chunks[c] is this stage's local chunk c (model chunk c * stages + stage, see
  // schedule.h): the first model chunk has the embedding, the last the head. pp is the
  // pipeline group (group rank = stage). The schedule is validated here.
  PipelineExecutor(Schedule schedule, int stage, std::vector<ModelChunk*> chunks, Communicator& pp,
                   PipelineShape shape);
  ~PipelineExecutor();
  PipelineExecutor(const PipelineExecutor&) = delete;
  PipelineExecutor& operator=(const PipelineExecutor&) = delete;

  // How many compute actions ahead receives are posted (0: only when reached).
  void set_recv_lookahead(int n) { lookahead_ = n; }
  // Called just before an action that accumulates weight gradients of (microbatch, local
  // chunk): the fused B, or W (tests check each pair gets exactly one). DataParallel needs
  // no such call: it counts the passes in its hooks (DataParallel::begin_step).
  void set_before_weight_grads(std::function<void(int mb, int chunk)> fn) {
    before_weight_grads_ = std::move(fn);
  }

  // Runs every action of this stage once. tokens and targets hold the rank's m
  // microbatches, (m * b, T) int32 each, microbatch j at row j * b; only the first stage
  // reads tokens and only the last reads targets (either may be null elsewhere). dloss
  // scales the loss gradient (1 / tokens of the global batch). Gradients accumulate (+=)
  // into the chunks' gradient storage.
  PipelineStepStats run(const int* tokens, const int* targets, float dloss,
                        const PipelineEventSink& sink = {});

  // Forward only (evaluation): every microbatch through every model chunk, no gradients.
  // The order is microbatch by microbatch, model chunk by model chunk, so each receive
  // waits only for work that comes earlier in that order on some stage: no schedule
  // needed, and nothing deadlocks. Activations travel as payloads without headers, tagged
  // P2PKind::user (destination model chunk, microbatch), apart from run()'s messages.
  // tokens, targets: as for run(). Returns the summed token cross-entropy on the stage
  // holding the head (0 elsewhere). Every stage of the pp group must call it.
  double evaluate(const int* tokens, const int* targets);

 private:
  struct Recv;
  struct Send;
  struct StepInputs {
    const int* tokens;
    const int* targets;
    float dloss;
  };
  void compute(const Action& a, StepInputs& in, PipelineStepStats& st);
  int model_chunk(int c) const { return s_.model_chunk(stage_, c); }
  int pair(int mb, int c) const { return mb * s_.chunks + c; }
  int box(bool grad, int mb, int c) const {
    return (grad ? s_.microbatches * s_.chunks : 0) + pair(mb, c);
  }
  int acquire_buffer();
  void release_buffer(int i);
  void post_receives(size_t from);
  void wait_receive(size_t index);
  void deliver(bool grad, int mb, int c, int dest_model_chunk, const float* src);
  void release_slot(int mb, int c);
  void issue_send(const Action& a);
  void reap_sends(bool wait_all);
  void take_input(bool grad, int mb, int c, float* dst);
  void emit(const std::string& name, const char* cat, double begin, double end) const;

  Schedule s_;
  int stage_;
  std::vector<ModelChunk*> chunks_;
  Communicator& pp_;
  PipelineShape shape_;
  int lookahead_ = 2;
  std::function<void(int, int)> before_weight_grads_;

  std::vector<ExecStep> order_;  // execution_order() of this stage's list

  // Per step.
  const PipelineEventSink* sink_ = nullptr;
  std::vector<int> slot_;    // activation slot of each (mb, chunk), -1 when none
  std::vector<int> inbox_;   // arrived tensor (buffer index) per (grad?, mb, chunk)
  std::vector<int> outbox_;  // produced, not yet sent tensor per (grad?, mb, chunk)
  std::vector<std::unique_ptr<Recv>> recvs_;  // per action index; null when not a RECV
  std::vector<std::unique_ptr<Send>> sends_;  // issued, not yet known complete
  size_t post_cursor_ = 0;
  int live_ = 0, peak_ = 0;

  // Landing and send buffers, reused across steps.
  std::vector<Arena> buffers_;
  std::vector<int> free_buffers_;
};

}  // namespace mt
