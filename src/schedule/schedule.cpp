#include "schedule/schedule.h"

#include <algorithm>

#include "core/error.h"

namespace mt {

const char* action_kind_name(ActionKind k) {
  switch (k) {
    case ActionKind::F:
      return "F";
    case ActionKind::B:
      return "B";
    case ActionKind::W:
      return "W";
    case ActionKind::FB:
      return "FB";
    case ActionKind::SEND_ACT:
      return "SEND_ACT";
    case ActionKind::RECV_ACT:
      return "RECV_ACT";
    case ActionKind::SEND_GRAD:
      return "SEND_GRAD";
    case ActionKind::RECV_GRAD:
      return "RECV_GRAD";
  }
  return "?";
}

std::string to_string(const Action& a) {
  if (a.kind == ActionKind::FB)
    return str(to_string(forward_half(a)), "&", to_string(backward_half(a)));
  if (is_compute(a.kind)) {
    std::string s = str(action_kind_name(a.kind), a.microbatch);
    return a.chunk == 0 ? s : str(s, ".", a.chunk);
  }
  const char* arrow = is_send(a.kind) ? "->" : "<-";
  return str(action_kind_name(a.kind), "(", a.microbatch, ".", a.chunk, arrow, a.peer, ")");
}

MessageKey message_key(const Schedule& s, int stage, const Action& a) {
  const int k = s.model_chunk(stage, a.chunk);
  switch (a.kind) {
    case ActionKind::SEND_ACT:
      return {false, a.microbatch, k + 1};
    case ActionKind::RECV_ACT:
      return {false, a.microbatch, k};
    case ActionKind::SEND_GRAD:
      return {true, a.microbatch, k - 1};
    case ActionKind::RECV_GRAD:
      return {true, a.microbatch, k};
    default:
      MT_CHECK(false, "message_key of compute action ", to_string(a));
  }
  return {};
}

ScheduleBuilder::ScheduleBuilder(ScheduleKind kind, int stages, int microbatches, int chunks,
                                 bool split, ChunkPlacement placement) {
  MT_REQUIRE(stages >= 1, "--pp must be >= 1 (got ", stages, ")");
  MT_REQUIRE(microbatches >= 1, "--microbatches must be >= 1 (got ", microbatches, ")");
  MT_REQUIRE(chunks >= 1, "--virtual-stages must be >= 1 (got ", chunks, ")");
  MT_CHECK(placement != ChunkPlacement::v_shape || chunks == 2, "a V holds 2 chunks per stage");
  s_.kind = kind;
  s_.name = schedule_name(kind);
  s_.stages = stages;
  s_.microbatches = microbatches;
  s_.chunks = chunks;
  s_.split_backward = split;
  s_.placement = placement;
  s_.actions.resize(stages);
}

// An F's input comes from model chunk k-1, a B's from k+1; nothing crosses within a stage.
void ScheduleBuilder::receive_input(int stage, ActionKind compute, int mb, int chunk) {
  const bool forward = compute == ActionKind::F;
  const int from = s_.model_chunk(stage, chunk) + (forward ? -1 : 1);
  if (from < 0 || from >= s_.model_chunks() || s_.stage_of(from) == stage) return;
  s_.actions[stage].push_back(
      {forward ? ActionKind::RECV_ACT : ActionKind::RECV_GRAD, mb, chunk, s_.stage_of(from)});
}

void ScheduleBuilder::send_output(int stage, ActionKind compute, int mb, int chunk) {
  const bool forward = compute == ActionKind::F;
  const int to = s_.model_chunk(stage, chunk) + (forward ? 1 : -1);
  if (to < 0 || to >= s_.model_chunks() || s_.stage_of(to) == stage) return;
  s_.actions[stage].push_back(
      {forward ? ActionKind::SEND_ACT : ActionKind::SEND_GRAD, mb, chunk, s_.stage_of(to)});
}

void ScheduleBuilder::forward(int stage, int mb, int chunk) {
  receive_input(stage, ActionKind::F, mb, chunk);
  s_.actions[stage].push_back({ActionKind::F, mb, chunk, -1});
  send_output(stage, ActionKind::F, mb, chunk);
}

void ScheduleBuilder::backward(int stage, int mb, int chunk) {
  receive_input(stage, ActionKind::B, mb, chunk);
  s_.actions[stage].push_back({ActionKind::B, mb, chunk, -1});
  send_output(stage, ActionKind::B, mb, chunk);
}

void ScheduleBuilder::weight(int stage, int mb, int chunk) {
  s_.actions[stage].push_back({ActionKind::W, mb, chunk, -1});
}

void ScheduleBuilder::forward_backward(int stage, int f_mb, int f_chunk, int b_mb, int b_chunk) {
  receive_input(stage, ActionKind::F, f_mb, f_chunk);
  receive_input(stage, ActionKind::B, b_mb, b_chunk);
  s_.actions[stage].push_back({ActionKind::FB, f_mb, f_chunk, -1, b_mb, b_chunk});
  send_output(stage, ActionKind::F, f_mb, f_chunk);
  send_output(stage, ActionKind::B, b_mb, b_chunk);
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> names;
  for (const auto& named : schedule_kinds()) names.push_back(named.first);
  return names;
}

std::string schedule_names_joined(const std::string& sep, const std::string& last_sep) {
  const std::vector<std::string> names = schedule_names();
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? last_sep : sep) + names[i];
  return out;
}

void check_schedule_args(ScheduleKind kind, int stages, int microbatches, int virtual_stages) {
  MT_REQUIRE(stages >= 1, "--pp must be >= 1 (got ", stages, ")");
  MT_REQUIRE(microbatches >= 1, "--microbatches must be >= 1 (got ", microbatches, ")");
  switch (kind) {
    case ScheduleKind::dualpipev:
      MT_REQUIRE(virtual_stages == 1 || virtual_stages == 2,
                 "--schedule dualpipev places 2 chunks on every stage (the V); drop "
                 "--virtual-stages or give 2 (got ",
                 virtual_stages, ")");
      MT_REQUIRE(microbatches >= 2 * stages, "--schedule dualpipev needs --microbatches (",
                 microbatches, ") >= 2 x --pp (", 2 * stages,
                 "): every stage fills both of its chunks before its first F&B pair");
      return;
    case ScheduleKind::interleaved:
      MT_REQUIRE(virtual_stages >= 2, "--schedule interleaved needs --virtual-stages >= 2 (got ",
                 virtual_stages, ")");
      MT_REQUIRE(microbatches % stages == 0, "--schedule interleaved needs --microbatches (",
                 microbatches, ") to be a multiple of --pp (", stages,
                 "): microbatches go through the chunks in groups of pp");
      return;
    case ScheduleKind::gpipe:
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1:
      MT_REQUIRE(virtual_stages == 1, "--virtual-stages ", virtual_stages,
                 " applies only to --schedule interleaved (", schedule_name(kind), " uses 1)");
      return;
  }
}

Schedule make_schedule(ScheduleKind kind, int stages, int microbatches, int virtual_stages) {
  check_schedule_args(kind, stages, microbatches, virtual_stages);
  switch (kind) {
    case ScheduleKind::gpipe:
      return schedule_gpipe(stages, microbatches);
    case ScheduleKind::one_f_one_b:
      return schedule_1f1b(stages, microbatches);
    case ScheduleKind::interleaved:
      return schedule_interleaved(stages, microbatches, virtual_stages);
    case ScheduleKind::zb_h1:
      return schedule_zb_h1(stages, microbatches);
    case ScheduleKind::dualpipev:
      return schedule_dualpipev(stages, microbatches);
  }
  MT_CHECK(false, "unknown schedule kind");
  return {};
}

void check_schedule_args(const std::string& name, int stages, int microbatches,
                         int virtual_stages) {
  check_schedule_args(schedule_kind(name), stages, microbatches, virtual_stages);
}

Schedule make_schedule(const std::string& name, int stages, int microbatches, int virtual_stages) {
  return make_schedule(schedule_kind(name), stages, microbatches, virtual_stages);
}

ChunkPlacement placement_of(ScheduleKind schedule) {
  return schedule == ScheduleKind::dualpipev ? ChunkPlacement::v_shape
                                             : ChunkPlacement::interleaved;
}

int chunks_per_stage(ScheduleKind schedule, int virtual_stages) {
  return schedule == ScheduleKind::dualpipev ? 2 : virtual_stages;
}

}  // namespace mt
