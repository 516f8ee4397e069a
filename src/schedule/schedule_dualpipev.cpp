// DualPipeV: DeepSeek-V3's DualPipe (DeepSeek-AI 2024, section 3.2.1) cut in half into a V
// (Sea AI Lab's "cut-in-half"; deepseek-ai/DualPipe, torch's ScheduleDualPipeV). Every
// stage holds two chunks of the model: local chunk 0 = model chunk s on the way down, local
// chunk 1 = model chunk 2p-1-s on the way back up (schedule.h, ChunkPlacement::v_shape), so
// stage 0 holds the embedding and the head. Once both chunks are full, a stage runs
// forward-backward pairs of different microbatches as one overlapped action (FB: the
// forward of one chunk with the backward of the other), so one half's transfers run under
// the other half's compute (execution_order.h). The backward is split as in zb-h1: B is
// the input gradient, which leaves before its W is computed; W runs at once in the steady
// state and is deferred into the drain at the end.
//
// Memory: the down chunk holds up to 2p - s microbatches (its 2(p-1-s) warmup forwards,
// the s + 1 of the fill and one more before its first backward) and the up chunk s + 1:
// every stage holds 2p + 1 (microbatch, chunk) pairs at most, each about half a stage's
// activations, so p + 1/2 stage-microbatches against 1F1B's p on stage 0 (the DualPipe
// table's PP + 1 chunks for PP = 2p). Needs m >= 2p: every stage fills both chunks before
// its first pair.
#include <deque>
#include <utility>

#include "core/error.h"
#include "schedule/schedule.h"

namespace mt {

namespace {

constexpr int kDown = 0, kUp = 1;  // local chunks: model chunk s, and 2p-1-s

// One stage's list, written phase by phase. Each chunk runs its F's and its B's in
// microbatch order, so counters say which microbatch comes next.
class VStageWriter {
 public:
  VStageWriter(ScheduleBuilder& b, int stage) : b_(b), s_(stage) {}
  void f(int chunk) { b_.forward(s_, next_f_[chunk]++, chunk); }
  // B of the chunk's next microbatch; its W follows at once unless deferred.
  void b(int chunk, bool defer_w) {
    const int mb = next_b_[chunk]++;
    b_.backward(s_, mb, chunk);
    if (defer_w)
      deferred_.push_back({mb, chunk});
    else
      b_.weight(s_, mb, chunk);
  }
  // F of one chunk overlapped with B of the other; the W follows at once.
  void fb(int f_chunk, int b_chunk) {
    const int f_mb = next_f_[f_chunk]++, b_mb = next_b_[b_chunk]++;
    b_.forward_backward(s_, f_mb, f_chunk, b_mb, b_chunk);
    b_.weight(s_, b_mb, b_chunk);
  }
  // The oldest deferred W, if any.
  void w() {
    if (deferred_.empty()) return;
    b_.weight(s_, deferred_.front().first, deferred_.front().second);
    deferred_.pop_front();
  }
  void remaining_w() {
    while (!deferred_.empty()) w();
  }

 private:
  ScheduleBuilder& b_;
  int s_;
  int next_f_[2] = {0, 0}, next_b_[2] = {0, 0};
  std::deque<std::pair<int, int>> deferred_;  // (microbatch, chunk) of postponed W's
};

}  // namespace

Schedule schedule_dualpipev(int stages, int microbatches) {
  ScheduleBuilder b(ScheduleKind::dualpipev, stages, microbatches, 2, /*split=*/true,
                    ChunkPlacement::v_shape);
  MT_REQUIRE(microbatches >= 2 * stages, "--schedule dualpipev needs --microbatches (",
             microbatches, ") >= 2 x --pp (", 2 * stages,
             "): every stage fills both of its chunks before its first F&B pair");
  const int p = stages, m = microbatches;
  for (int s = 0; s < p; ++s) {
    VStageWriter st(b, s);
    const int below = p - 1 - s;  // stages under this one
    // Forwards of the down chunk before the first one comes back up through this stage:
    // down to the bottom and back, one per stage each way.
    const int num_warmup = 2 * below;
    const int num_steady = m - 2 * p + s + 1;  // pairs of F&B pairs
    // warmup
    for (int i = 0; i < num_warmup; ++i) st.f(kDown);
    // fill: the up chunk starts, one F of each chunk in turn
    for (int i = 0; i <= s; ++i) st.f(kDown), st.f(kUp);
    // lead: the first backwards of the up chunk, each gradient sent before its W
    for (int i = 0; i < below; ++i) st.b(kUp, false), st.f(kUp);
    // steady: F down & B up, then F up & B down. The bottom stage's first F down feeds its
    // own up chunk, which waits for it: not overlapped (as DeepSeek's schedule does).
    for (int i = 0; i < num_steady; ++i) {
      if (i == 0 && below == 0)
        st.f(kDown), st.b(kUp, false);
      else
        st.fb(kDown, kUp);
      st.fb(kUp, kDown);
    }
    // cooldown: the down chunk has no forwards left
    for (int i = 0; i < below; ++i) st.b(kUp, false), st.fb(kUp, kDown);
    // drain: the last backwards, up and down in turn; the second half defer their W's ...
    for (int k = 0; k < 2 * (s + 1); ++k) st.b(k % 2 == 0 ? kUp : kDown, k >= s + 1);
    // ... which fill the gaps while the down chunk's last gradients come back up
    for (int i = 0; i < below; ++i) st.w(), st.b(kDown, true);
    st.remaining_w();
  }
  return b.take();
}

}  // namespace mt
