#include "parallel/pipeline/executor.h"

#include <array>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "schedule/execution_order.h"
#include "schedule/schedule_validator.h"

namespace mt {

namespace {

constexpr int32_t kMagic = 0x4D545050;  // "MTPP"
constexpr int kHeaderInts = 8;
using Header = std::array<int32_t, kHeaderInts>;

Header make_header(const MessageKey& key, const PipelineShape& sh) {
  return {kMagic,
          key.grad ? 1 : 0,
          key.microbatch,
          key.dest_model_chunk,
          sh.b,
          sh.T,
          int32_t(sh.rows()),
          sh.C};
}

std::string describe(const Header& h) {
  if (h[0] != kMagic) return str("a message that is not a pipeline header (", h[0], ")");
  return str(h[1] ? "gradient" : "activation", " of microbatch ", h[2], " for model chunk ", h[3],
             ", b ", h[4], " T ", h[5], " (", h[6], " x ", h[7], ")");
}

// Tags: the payload by (kind, destination model chunk, microbatch); the header in its own
// kind, with activation and gradient apart (interleaving sends both to one chunk's stage).
int payload_tag(const MessageKey& k) {
  return make_p2p_tag(k.grad ? P2PKind::gradient : P2PKind::activation, k.dest_model_chunk,
                      k.microbatch);
}
int header_tag(const MessageKey& k) {
  return make_p2p_tag(P2PKind::header, 2 * k.dest_model_chunk + (k.grad ? 1 : 0), k.microbatch);
}

// PyTorch's pipelining names: F, B, W and SEND_F / RECV_F (activations), SEND_B / RECV_B.
std::string event_name(ActionKind kind, int model_chunk, int mb) {
  const char* k = "";
  switch (kind) {
    case ActionKind::F:
      k = "F";
      break;
    case ActionKind::B:
      k = "B";
      break;
    case ActionKind::W:
      k = "W";
      break;
    case ActionKind::FB:  // traced as its two halves
      k = "FB";
      break;
    case ActionKind::SEND_ACT:
      k = "SEND_F";
      break;
    case ActionKind::RECV_ACT:
      k = "RECV_F";
      break;
    case ActionKind::SEND_GRAD:
      k = "SEND_B";
      break;
    case ActionKind::RECV_GRAD:
      k = "RECV_B";
      break;
  }
  return str(model_chunk, k, mb);
}

}  // namespace

struct PipelineExecutor::Recv {
  MessageKey key;
  Header header{};
  Work header_work, payload_work;
  int buffer = -1;
  bool posted = false;
};

struct PipelineExecutor::Send {
  Header header{};
  Work header_work, payload_work;
  int buffer = -1;
};

PipelineExecutor::PipelineExecutor(Schedule schedule, int stage, std::vector<ModelChunk*> chunks,
                                   Communicator& pp, PipelineShape shape)
    : s_(std::move(schedule)), stage_(stage), chunks_(std::move(chunks)), pp_(pp), shape_(shape) {
  require_valid_schedule(s_);
  MT_CHECK(stage_ >= 0 && stage_ < s_.stages, "stage ", stage_, " of ", s_.stages);
  MT_CHECK(pp_.size() == s_.stages && pp_.rank() == stage_, "pp group ", pp_.name(), " (rank ",
           pp_.rank(), ") does not hold stage ", stage_, " of ", s_.stages);
  MT_CHECK(int(chunks_.size()) == s_.chunks, "stage ", stage_, " holds ", chunks_.size(),
           " chunks but the schedule runs ", s_.chunks);
  // make_p2p_tag has 8 bits of chunk; headers use two values per model chunk.
  MT_CHECK(s_.model_chunks() <= 128, "at most 128 model chunks (got ", s_.model_chunks(), ")");
  MT_CHECK(shape_.rows() * size_t(shape_.row_split) == size_t(shape_.b) * shape_.T,
           "b*T must be divisible by row_split");
  const int last = s_.model_chunks() - 1;
  for (int c = 0; c < s_.chunks; ++c) {
    const ChunkSpec& spec = chunks_[c]->spec();
    const int k = model_chunk(c);
    MT_CHECK(spec.has_embedding == (k == 0) && spec.has_head == (k == last), "local chunk ", c,
             " of stage ", stage_, " is model chunk ", k,
             ": the embedding belongs to chunk 0 "
             "and the head to chunk ",
             last, " only");
  }
  const auto& list = s_.actions[stage_];
  recvs_.resize(list.size());
  for (size_t i = 0; i < list.size(); ++i)
    if (is_recv(list[i].kind)) {
      recvs_[i] = std::make_unique<Recv>();
      recvs_[i]->key = message_key(s_, stage_, list[i]);
    }
  order_ = execution_order(s_, stage_);
  slot_.assign(size_t(s_.microbatches) * s_.chunks, -1);
  inbox_.assign(2 * slot_.size(), -1);
  outbox_.assign(2 * slot_.size(), -1);
}

PipelineExecutor::~PipelineExecutor() {
  // Posted receives and unfinished sends point into buffers_, which as a later member would
  // be freed first. A rank that fails mid-schedule unwinds through here while its peer may
  // still deliver into a posted receive (ASan caught a write into the freed buffer in
  // PipelineExecutor.MismatchedHeaderIsAClearError): dropping the Works first withdraws them
  // from the communicator, or waits for a delivery already under way.
  recvs_.clear();
  sends_.clear();
}

int PipelineExecutor::acquire_buffer() {
  if (free_buffers_.empty()) {
    buffers_.emplace_back(shape_.floats());
    return int(buffers_.size() - 1);
  }
  const int i = free_buffers_.back();
  free_buffers_.pop_back();
  return i;
}

void PipelineExecutor::release_buffer(int i) {
  free_buffers_.push_back(i);
}

void PipelineExecutor::emit(const std::string& name, const char* cat, double begin,
                            double end) const {
  if (sink_ && *sink_) (*sink_)(name, cat, begin, end);
}

// Posts every receive that lies before the (lookahead + 1)-th compute step from step
// `from` of the execution order (an FB's halves count as one compute each).
void PipelineExecutor::post_receives(size_t from) {
  const auto& list = s_.actions[stage_];
  int computes = 0;
  for (size_t k = from; k < order_.size() && computes <= lookahead_; ++k) {
    const size_t j = size_t(order_[k].index);
    if (is_compute(list[j].kind)) {
      ++computes;
      continue;
    }
    Recv* r = recvs_[j].get();
    if (!r || r->posted) continue;
    r->buffer = acquire_buffer();
    r->header_work =
        pp_.recv(r->header.data(), kHeaderInts, DType::i32, list[j].peer, header_tag(r->key));
    r->payload_work = pp_.recv(buffers_[r->buffer].data(), shape_.floats(), DType::f32,
                               list[j].peer, payload_tag(r->key));
    r->posted = true;
  }
}

void PipelineExecutor::wait_receive(size_t index) {
  const Action& a = s_.actions[stage_][index];
  Recv& r = *recvs_[index];
  MT_CHECK(r.posted, "receive ", to_string(a), " was not posted");
  const double t0 = now_seconds();
  r.header_work.wait();
  const Header want = make_header(r.key, shape_);
  if (r.header != want)
    throw RuntimeError(str("pipeline stage ", stage_, " (rank ", pp_.global_rank(stage_),
                           ") expected the ", describe(want), " from stage ", a.peer, " (rank ",
                           pp_.global_rank(a.peer), ") but its header says ", describe(r.header)));
  r.payload_work.wait();
  const double t1 = now_seconds();
  r.posted = false;
  int& slot = inbox_[box(r.key.grad, a.microbatch, a.chunk)];
  MT_CHECK(slot < 0, "second arrival of ", to_string(a));
  slot = r.buffer;
  emit(event_name(a.kind, model_chunk(a.chunk), a.microbatch), "comm", t0, t1);
}

// Copies a tensor produced by local chunk c (of mb) for model chunk `dest`: into the inbox
// when the destination is on this stage (p = 1), else into the outbox for its SEND.
void PipelineExecutor::deliver(bool grad, int mb, int c, int dest, const float* src) {
  const int buf = acquire_buffer();
  std::memcpy(buffers_[buf].data(), src, shape_.floats() * sizeof(float));
  int& slot = s_.stage_of(dest) == stage_ ? inbox_[box(grad, mb, s_.local_chunk_of(dest))]
                                          : outbox_[box(grad, mb, c)];
  MT_CHECK(slot < 0, "tensor produced twice");
  slot = buf;
}

void PipelineExecutor::take_input(bool grad, int mb, int c, float* dst) {
  int& buf = inbox_[box(grad, mb, c)];
  MT_CHECK(buf >= 0, "stage ", stage_, ": the ", grad ? "gradient" : "activation",
           " of microbatch ", mb, " for chunk ", c, " has not arrived");
  std::memcpy(dst, buffers_[buf].data(), shape_.floats() * sizeof(float));
  release_buffer(buf);
  buf = -1;
}

void PipelineExecutor::issue_send(const Action& a) {
  const double t0 = now_seconds();
  const MessageKey key = message_key(s_, stage_, a);
  int& buf = outbox_[box(key.grad, a.microbatch, a.chunk)];
  MT_CHECK(buf >= 0, "stage ", stage_, ": ", to_string(a), " before its tensor was produced");
  auto send = std::make_unique<Send>();
  send->header = make_header(key, shape_);
  send->buffer = buf;
  buf = -1;
  send->header_work =
      pp_.send(send->header.data(), kHeaderInts, DType::i32, a.peer, header_tag(key));
  send->payload_work = pp_.send(buffers_[send->buffer].data(), shape_.floats(), DType::f32, a.peer,
                                payload_tag(key));
  sends_.push_back(std::move(send));
  emit(event_name(a.kind, model_chunk(a.chunk), a.microbatch), "comm", t0, now_seconds());
}

void PipelineExecutor::reap_sends(bool wait_all) {
  size_t kept = 0;
  for (auto& s : sends_) {
    if (wait_all) {
      s->header_work.wait();
      s->payload_work.wait();
    } else if (!s->header_work.test() || !s->payload_work.test()) {
      sends_[kept++] = std::move(s);
      continue;
    }
    release_buffer(s->buffer);
  }
  sends_.resize(kept);
}

void PipelineExecutor::release_slot(int mb, int c) {
  int& slot = slot_[pair(mb, c)];
  chunks_[c]->pool().release(slot);
  slot = -1;
  --live_;
}

// One F, B or W (an FB's half is passed as the F or B it stands for).
void PipelineExecutor::compute(const Action& a, StepInputs& in, PipelineStepStats& st) {
  const int last = s_.model_chunks() - 1;
  const int mb = a.microbatch, c = a.chunk, k = model_chunk(c);
  const int b = shape_.b, T = shape_.T;
  const size_t mb_tokens = size_t(b) * T;
  ModelChunk& chunk = *chunks_[c];
  if (a.kind == ActionKind::F) {
    MT_CHECK(slot_[pair(mb, c)] < 0, "second forward of ", to_string(a));
    const int slot = chunk.pool().acquire();
    slot_[pair(mb, c)] = slot;
    if (++live_ > peak_) peak_ = live_;
    if (k > 0) take_input(false, mb, c, chunk.input(slot));
    MT_CHECK(k > 0 || in.tokens, "the first stage needs tokens");
    MT_CHECK(k < last || in.targets, "the last stage needs targets");
    const int* tok = k == 0 ? in.tokens + mb * mb_tokens : nullptr;
    const int* tgt = k == last ? in.targets + mb * mb_tokens : nullptr;
    chunk.dropout().set_microbatch(slot, mb, b, T);  // --dropout: the slot's tokens
    st.loss_sum += chunk.forward(slot, tok, tgt, b, T, in.dloss);
    if (k < last) deliver(false, mb, c, k + 1, chunk.output(slot));
    return;
  }
  const int slot = slot_[pair(mb, c)];
  MT_CHECK(slot >= 0, to_string(a), " before its forward");
  if (a.kind == ActionKind::W) {
    if (before_weight_grads_) before_weight_grads_(mb, c);
    chunk.backward_weight(slot, b, T);
    release_slot(mb, c);
    return;
  }
  if (k < last) take_input(true, mb, c, chunk.grad_output(slot));
  if (s_.split_backward) {
    chunk.backward_input(slot, b, T);
  } else {
    if (before_weight_grads_) before_weight_grads_(mb, c);
    chunk.backward(slot, b, T);
  }
  if (k > 0) deliver(true, mb, c, k - 1, chunk.grad_input(slot));
  if (!s_.split_backward) release_slot(mb, c);
}

PipelineStepStats PipelineExecutor::run(const int* tokens, const int* targets, float dloss,
                                        const PipelineEventSink& sink) {
  sink_ = &sink;
  PipelineStepStats st;
  StepInputs in{tokens, targets, dloss};
  live_ = peak_ = 0;
  const double t_begin = now_seconds();
  const auto& list = s_.actions[stage_];
  // In execution order: an FB's F half, its output's send, its B half's receive, its B half.
  for (size_t k = 0; k < order_.size(); ++k) {
    post_receives(k);
    const ExecStep& e = order_[k];
    const Action& listed = list[size_t(e.index)];
    if (is_recv(listed.kind)) {
      wait_receive(size_t(e.index));
      continue;
    }
    if (is_send(listed.kind)) {
      issue_send(listed);
      continue;
    }
    const Action a = e.half == Half::forward    ? forward_half(listed)
                     : e.half == Half::backward ? backward_half(listed)
                                                : listed;
    const double t0 = now_seconds();
    compute(a, in, st);
    const double t1 = now_seconds();
    st.busy_seconds += t1 - t0;
    emit(event_name(a.kind, model_chunk(a.chunk), a.microbatch), "compute", t0, t1);
    reap_sends(false);
  }
  reap_sends(true);
  st.step_seconds = now_seconds() - t_begin;
  st.peak_in_flight = peak_;
  MT_CHECK(live_ == 0, "stage ", stage_, ": ", live_, " activation slots left after the step");
  for (size_t i = 0; i < inbox_.size(); ++i)
    MT_CHECK(inbox_[i] < 0 && outbox_[i] < 0, "stage ", stage_, ": a tensor was never consumed");
  sink_ = nullptr;
  return st;
}

double PipelineExecutor::evaluate(const int* tokens, const int* targets) {
  const int last = s_.model_chunks() - 1;
  const int b = shape_.b, T = shape_.T;
  const size_t mb_tokens = size_t(b) * T, n = shape_.floats();
  double loss = 0;
  std::vector<Work> sends;
  std::vector<int> send_buffers;
  int carried = -1;  // output of the previous model chunk when it ran on this stage (p = 1)
  for (int mb = 0; mb < s_.microbatches; ++mb) {
    for (int k = 0; k <= last; ++k) {
      if (s_.stage_of(k) != stage_) continue;
      ModelChunk& chunk = *chunks_[size_t(s_.local_chunk_of(k))];
      const int slot = chunk.pool().acquire();
      if (k > 0 && carried >= 0) {
        std::memcpy(chunk.input(slot), buffers_[carried].data(), n * sizeof(float));
        release_buffer(carried);
        carried = -1;
      } else if (k > 0) {
        pp_.recv(chunk.input(slot), n, DType::f32, s_.stage_of(k - 1),
                 make_p2p_tag(P2PKind::user, k, mb))
            .wait();
      }
      const int* tok = k == 0 ? tokens + mb * mb_tokens : nullptr;
      const int* tgt = k == last ? targets + mb * mb_tokens : nullptr;
      loss += chunk.forward(slot, tok, tgt, b, T, 0.f);
      if (k < last) {
        // Copied out so the slot is free for the next microbatch while the send runs.
        const int buf = acquire_buffer();
        std::memcpy(buffers_[buf].data(), chunk.output(slot), n * sizeof(float));
        if (s_.stage_of(k + 1) == stage_) {
          carried = buf;
        } else {
          sends.push_back(pp_.send(buffers_[buf].data(), n, DType::f32, s_.stage_of(k + 1),
                                   make_p2p_tag(P2PKind::user, k + 1, mb)));
          send_buffers.push_back(buf);
        }
      }
      chunk.pool().release(slot);
    }
  }
  for (Work& w : sends) w.wait();
  for (int buf : send_buffers) release_buffer(buf);
  return loss;
}

}  // namespace mt
