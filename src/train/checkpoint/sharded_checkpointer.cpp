#include "train/checkpoint/sharded_checkpointer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/temp_marker.h"
#include "core/timer.h"
#include "model/moe_layer.h"
#include "train/checkpoint/checkpoint_dir.h"
#include "train/checkpoint/retention.h"
#include "train/global_view.h"
#include "train/safetensors.h"
#include "train/tokenizer.h"

namespace fs = std::filesystem;

namespace mt {

namespace {

using json = nlohmann::json;

// Point-to-point tag of the writer's reports to rank 0 (its own communicator: no other
// traffic shares it).
int report_tag() {
  return make_p2p_tag(P2PKind::user, 253, 0);
}

// The deduplication rule of sharded_checkpointer.h.
bool writes(const ParamInfo& p, const Session& s) {
  const ParallelOptions& par = s.opts.parallel;
  if (p.shard.replicated() && s.ctx.coord.tp != 0) return false;
  // The tied token table's last-stage copy is the first stage's (an untied head is not).
  const ModelConfig& cfg = s.model.config();
  if (s.ctx.coord.pp != 0 && cfg.tied() && p.name == cfg.token_table_name()) return false;
  if (par.ep > 1 && is_expert_param(p.name))
    return !s.ctx.ep_replica || s.ctx.ep_replica->rank() == 0;
  // ZeRO 0: every rank of the dp x cp replica group holds the whole state (ZeRO >= 1 splits
  // it over that group: each writes its own update pieces).
  if (par.zero == 0) return s.ctx.coord.dp == 0 && s.ctx.coord.cp == 0;
  return true;
}

std::string layout_text(const ParallelOptions& p) {
  return str("dp ", p.dp, " zero ", p.zero, " tp ", p.tp, p.sequence_parallel ? " sp" : "", " pp ",
             p.pp, " virtual-stages ", p.virtual_stages, " ep ", p.ep,
             p.cp > 1 ? str(" cp ", p.cp) : std::string());
}

bool same_path(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::weakly_canonical(fs::absolute(a), ec) == fs::weakly_canonical(fs::absolute(b), ec);
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.bin", rank);
  return buf;
}

std::vector<std::string> gather_to_root(Communicator& c, const std::string& mine) {
  int64_t n = int64_t(mine.size());
  std::vector<int64_t> sizes(size_t(c.size()));
  c.all_gather(&n, sizes.data(), 1, DType::i64).wait();
  std::vector<std::string> out;
  if (c.rank() != 0) {
    if (n > 0) c.send(mine.data(), size_t(n), DType::u8, 0, report_tag()).wait();
    return out;
  }
  out.resize(size_t(c.size()));
  out[0] = mine;
  std::vector<Work> pending;
  for (int r = 1; r < c.size(); ++r) {
    out[size_t(r)].resize(size_t(sizes[size_t(r)]));
    if (sizes[size_t(r)] > 0)
      pending.push_back(
          c.recv(out[size_t(r)].data(), size_t(sizes[size_t(r)]), DType::u8, r, report_tag()));
  }
  for (Work& w : pending) w.wait();
  return out;
}

std::string broadcast_from_root(Communicator& c, std::string s) {
  int64_t n = int64_t(s.size());
  c.broadcast(&n, 1, DType::i64, 0).wait();
  s.resize(size_t(n));
  if (n > 0) c.broadcast(s.data(), size_t(n), DType::u8, 0).wait();
  return s;
}

json runs_json(const std::vector<StridedRun>& runs) {
  json a = json::array();
  for (const StridedRun& r : runs) a.push_back({r.start, r.len, r.count, r.stride});
  return a;
}

std::vector<StridedRun> runs_from(const json& a) {
  std::vector<StridedRun> out;
  for (const json& r : a)
    out.push_back(
        {r[0].get<int64_t>(), r[1].get<int64_t>(), r[2].get<int64_t>(), r[3].get<int64_t>()});
  return out;
}

void warn(const std::string& text) {
  std::fprintf(stderr, "meshtrain: warning: %s\n", text.c_str());
}

}  // namespace

// The elements of one update piece this rank writes: their stretches within the piece
// (offset from the piece's start, length; padding left out) and their global indices.
struct ShardedCheckpointer::Piece {
  std::string name;
  size_t param_off = 0, dense_off = 0;
  std::vector<std::pair<size_t, size_t>> stretches;
  std::vector<StridedRun> runs;
  size_t elements = 0;
};

ShardedCheckpointer::ShardedCheckpointer(Session& s, CommWorld& world) : s_(s) {
  std::vector<int> all(size_t(world.size()));
  for (int r = 0; r < world.size(); ++r) all[size_t(r)] = r;
  comm_ = world.make_group(all, "checkpoint");
  const ParamTable& table = s.model.table();
  size_t dense = 0;
  for (const UpdatePiece& u : s.dp.update_pieces()) {
    const ParamInfo& p = table.at_offset(u.table_off);
    const size_t lo = u.table_off - p.offset;
    Piece piece;
    piece.name = p.name;
    piece.param_off = u.param_off;
    piece.dense_off = dense;
    dense += u.n;
    if (!writes(p, s)) continue;
    RunBuilder rb;
    map_local_range(p, lo, lo + u.n, [&](size_t l, int64_t g, int64_t n) {
      piece.stretches.push_back({l - lo, size_t(n)});
      rb.add(g, n);
    });
    if (rb.elements() == 0) continue;  // padding only
    piece.runs = rb.runs();
    piece.elements = size_t(rb.elements());
    pieces_.push_back(std::move(piece));
  }
  size_t off = 0;
  for (const Piece& p : pieces_)
    for (const std::string& suffix :
         {std::string(), std::string(kMomentSuffixes[0]), std::string(kMomentSuffixes[1])}) {
      segments_.push_back({p.name + suffix, 0, off * sizeof(float), p.runs});
      off += p.elements;
    }
  staged_floats_ = off;
  // Allocated and touched now: faulting in a shard-sized buffer inside the first save
  // would stall that step.
  staging_.assign(staged_floats_, 0.f);
  if (s.lead()) {
    bias_names_ = router_bias_names(s.view->whole());
    const IoOptions& io = s.opts.io;
    std::string damage;
    CheckpointLog log = CheckpointLog::read(io.save, &damage);
    if (!damage.empty())
      warn(str(damage, "; --keep-checkpoints will not delete the checkpoints it listed"));
    RunIdentity id = identify_run(log, io.save, io.load, io.resumed);
    retention_ = std::make_unique<CheckpointRetention>(io.save, io.keep_checkpoints, std::move(id),
                                                       std::move(log), warn);
    for (const std::string& t : remove_interrupted_saves(io.save))
      if (!io.quiet) std::printf("meshtrain: removed %s, left by an interrupted save\n", t.c_str());
  }
}

ShardedCheckpointer::~ShardedCheckpointer() {
  writer_.wait();
}

void ShardedCheckpointer::throw_if_failed(const std::string& result) {
  if (!result.empty()) throw RuntimeError(result);
}

void ShardedCheckpointer::check() {
  if (writer_.busy() && writer_.finished()) throw_if_failed(writer_.wait());
}

std::string ShardedCheckpointer::finish(int last_step) {
  save(last_step);
  throw_if_failed(writer_.wait());
  if (s_.opts.io.quiet) return "";
  return str("checkpoint saves held training for ", stall_s_, " s in total (", saves_,
             " saves, longest ", longest_stall_s_, " s)");
}

void ShardedCheckpointer::save(int step) {
  // The checkpoint this run resumed from already holds the state of its step: a run with
  // no step to take does not save it again (that would replace it).
  const std::string final_dir = s_.opts.io.save + "/" + step_dir_name(step);
  if (step == s_.start_step && !s_.opts.io.load.empty() && same_path(s_.opts.io.load, final_dir))
    return;
  const double t0 = now_seconds();
  throw_if_failed(writer_.wait());  // the staging buffer is free again
  // Router biases are a few floats per MoE layer: rank 0 gathers them and writes them.
  const std::vector<NamedTensor> biases = s_.view->router_biases_to_lead();
  size_t bias_floats = 0;
  for (const NamedTensor& b : biases) bias_floats += b.data.size();
  staging_.resize(staged_floats_ + bias_floats);
  float* out = staging_.data();
  const float* params = s_.dp.param_storage();
  const float* moments[] = {s_.opt.exp_avg().data(), s_.opt.exp_avg_sq().data()};
  for (const Piece& p : pieces_) {
    for (int which = 0; which < 3; ++which) {
      const float* src = which == 0 ? params + p.param_off : moments[which - 1] + p.dense_off;
      for (const auto& [rel, n] : p.stretches) {
        std::copy(src + rel, src + rel + n, out);
        out += n;
      }
    }
  }
  std::vector<ManifestSegment> segments = segments_;
  for (const NamedTensor& b : biases) {
    segments.push_back({b.name,
                        0,
                        uint64_t(out - staging_.data()) * sizeof(float),
                        {{0, int64_t(b.data.size()), 1, 0}}});
    out = std::copy(b.data.begin(), b.data.end(), out);
  }
  const int64_t position = s_.train.position();
  auto job = [this, step, position, segments = std::move(segments), final_dir]() {
    return write_job(step, position, segments, final_dir + ".tmp", final_dir);
  };
  if (s_.opts.io.save_sync)
    throw_if_failed(job());
  else
    writer_.start(std::move(job));
  const double stall = now_seconds() - t0;
  stall_s_ += stall;
  longest_stall_s_ = std::max(longest_stall_s_, stall);
  ++saves_;
}

}  // namespace mt

namespace mt {

// Runs on the writer thread (or the training thread with --save-sync), on every rank, over
// the writer's own communicator. Every rank takes part in every exchange whatever failed,
// so a failure on one rank never leaves another waiting.
std::string ShardedCheckpointer::write_job(int step, int64_t data_position,
                                           const std::vector<ManifestSegment>& segments,
                                           const std::string& tmp, const std::string& final_dir) {
  Communicator& c = *comm_;
  std::string error;
  int32_t ready = 1;
  if (c.rank() == 0) {
    try {
      retention_->before_save(step_dir_name(step));
      prepare_step_temp(tmp);
    } catch (const std::exception& e) {
      error = str("rank 0: ", e.what());
      ready = 0;
    }
  }
  c.broadcast(&ready, 1, DType::i32, 0).wait();
  json report = {{"error", error}};
  if (ready) {
    try {
      const ManifestFile f = write_shard_file(tmp + "/" + rank_file_name(s_.ctx.rank),
                                              staging_.data(), staging_.size(), segments);
      json crcs = json::array();
      for (uint32_t x : f.block_crc32c) crcs.push_back(x);
      json segs = json::array();
      for (const ManifestSegment& seg : segments)
        segs.push_back({seg.tensor, seg.offset, runs_json(seg.runs)});
      report = {
          {"error", ""}, {"name", f.name}, {"bytes", f.bytes}, {"crc", crcs}, {"segments", segs}};
    } catch (const std::exception& e) {
      report["error"] = str("rank ", s_.ctx.rank, ": ", e.what());
    }
  }
  const std::vector<std::string> reports = gather_to_root(c, report.dump());
  std::string result;
  if (c.rank() == 0) {
    try {
      result = publish(step, data_position, reports, tmp, final_dir);
    } catch (const std::exception& e) {
      result = str("rank 0: ", e.what());
    }
    if (!result.empty()) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
      result += str("; the checkpoint of step ", step,
                    " was not published (the checkpoints before it are intact)");
    }
  }
  return broadcast_from_root(c, result);
}

// Rank 0: the manifest from every rank's report, then the directory into place.
std::string ShardedCheckpointer::publish(int step, int64_t data_position,
                                         const std::vector<std::string>& reports,
                                         const std::string& tmp, const std::string& final_dir) {
  Manifest m;
  m.step = step;
  m.data_position = data_position;
  m.seed = s_.opts.optim.seed;
  m.model = s_.opts.model;
  m.layout = layout_text(s_.opts.parallel);
  m.metadata = tokenizer_metadata(s_.opts.io.tokenizer);
  m.run = s_.opts.run_config;
  for (const ParamInfo& p : s_.view->whole().entries()) {
    m.tensors.push_back({p.name, p.global_shape});
    for (const char* suffix : kMomentSuffixes)
      m.tensors.push_back({p.name + suffix, p.global_shape});
  }
  for (const std::string& b : bias_names_)
    m.tensors.push_back({b, {int64_t(s_.opts.model.experts)}});
  for (const std::string& text : reports) {
    const json r = json::parse(text);
    if (!r["error"].get<std::string>().empty()) return r["error"].get<std::string>();
  }
  for (const std::string& text : reports) {
    const json r = json::parse(text);
    ManifestFile f;
    f.name = r["name"].get<std::string>();
    f.bytes = r["bytes"].get<uint64_t>();
    for (const json& x : r["crc"]) f.block_crc32c.push_back(x.get<uint32_t>());
    const int file = int(m.files.size());
    m.files.push_back(std::move(f));
    for (const json& seg : r["segments"])
      m.segments.push_back(
          {seg[0].get<std::string>(), file, seg[1].get<uint64_t>(), runs_from(seg[2])});
  }
  // A rule of sharded_checkpointer.h that missed or doubled an element fails here, before
  // anything is published.
  check_manifest_coverage(m, "the checkpoint of step " + std::to_string(step));
  write_file_atomic(tmp + "/" + kManifestFile, manifest_json(m).dump() + "\n");
  fsync_path(tmp);
  retention_->record(step_dir_name(step), step, tmp);
  std::error_code ec;
  fs::rename(tmp, final_dir, ec);  // before_save made room; a folder there now stops the rename
  if (ec) throw RuntimeError(str("cannot rename ", tmp, " to ", final_dir, ": ", ec.message()));
  unmark_temporary(final_dir);  // its temporary's marker, inert under the final name
  fsync_path(final_dir);
  fsync_path(s_.opts.io.save);
  retention_->after_publish(step_dir_name(step));
  return "";
}

}  // namespace mt
