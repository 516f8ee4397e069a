#include "train/checkpoint/manifest.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/crc32c.h"
#include "core/error.h"
#include "train/checkpoint/metadata_checksum.h"

namespace mt {

using json = nlohmann::json;

int64_t ManifestTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t ManifestSegment::elements() const {
  int64_t n = 0;
  for (const StridedRun& r : runs) n += r.elements();
  return n;
}

json model_json(const ModelConfig& c) {
  json j = {{"layers", c.layers},
            {"dim", c.dim},
            {"heads", c.heads},
            {"seq", c.seq},
            {"positions", c.position_rows()},
            {"vocab", c.vocab},
            {"experts", c.experts},
            {"topk", c.topk},
            {"moe_every", c.moe_every},
            {"capacity_factor", c.capacity_factor},
            {"aux_loss_coef", c.aux_loss_coef},
            {"router_bias_update", c.router_bias_update}};
  if (c.llama()) {  // section 9's shape; absent for gpt2 (manifests before --arch)
    j["arch"] = arch_name(c.arch);
    j["kv_heads"] = c.kv();
    j["head_dim"] = c.head_dim();
    j["ffn_dim"] = c.hidden();
    j["rope_theta"] = c.rope_theta;
    j["norm_eps"] = c.norm_eps;
    j["tie_embeddings"] = c.tie_embeddings;
    if (c.rope_scaling.enabled()) {  // Llama 3.1's, from a Hugging Face config.json
      const RopeScaling& s = c.rope_scaling;
      j["rope_scaling"] = {{"factor", s.factor},
                           {"low_freq_factor", s.low_freq_factor},
                           {"high_freq_factor", s.high_freq_factor},
                           {"original_max_position", s.original_max_position}};
    }
  }
  return j;
}

void require_same_model(const Manifest& m, const ModelConfig& run, const std::string& where) {
  const json a = model_json(m.model), b = model_json(run);
  // The shape decides the tensors; the MoE coefficients are training settings a resumed
  // run may change, like the learning rate.
  for (const char* k : {"layers", "dim", "heads", "vocab", "experts", "moe_every", "positions",
                        "arch", "kv_heads", "head_dim", "ffn_dim", "tie_embeddings"}) {
    MT_REQUIRE(a.value(k, json()) == b.value(k, json()), where,
               ": the checkpoint holds a model with ", k, " ", a.value(k, json()).dump(),
               ", this run's has ", b.value(k, json()).dump(),
               " (a checkpoint of another model shape)");
  }
}

json manifest_json(const Manifest& m) {
  json tensors = json::array(), files = json::array(), segments = json::array();
  for (const ManifestTensor& t : m.tensors)
    tensors.push_back({{"name", t.name}, {"shape", t.shape}});
  for (const ManifestFile& f : m.files) {
    json crcs = json::array();
    for (uint32_t c : f.block_crc32c) crcs.push_back(crc32c_hex(c));
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", crcs}});
  }
  for (const ManifestSegment& s : m.segments) {
    json runs = json::array();
    for (const StridedRun& r : s.runs) runs.push_back({r.start, r.len, r.count, r.stride});
    segments.push_back(
        {{"tensor", s.tensor}, {"file", s.file}, {"offset", s.offset}, {"runs", runs}});
  }
  json j = {{"format", kShardedFormatName},
            {"format_version", kShardedFormatVersion},
            {"step", m.step},
            {"data_position", m.data_position},
            {"seed", m.seed},
            {"model", model_json(m.model)},
            {"layout", m.layout},
            {"block_bytes", kShardBlockBytes},
            {"tensors", tensors},
            {"files", files},
            {"segments", segments},
            {"metadata", m.metadata}};
  if (!m.run.is_null()) j["run"] = m.run;
  seal_json(j);
  return j;
}

std::string tensors_in(const Manifest& m, int file, uint64_t lo, uint64_t hi) {
  std::vector<std::string> names;
  for (const ManifestSegment& s : m.segments) {
    if (s.file != file) continue;
    const uint64_t end = s.offset + uint64_t(s.elements()) * sizeof(float);
    if (s.offset < hi && end > lo && std::find(names.begin(), names.end(), s.tensor) == names.end())
      names.push_back(s.tensor);
  }
  if (names.empty()) return "no tensor";
  std::string out = "tensor " + names[0];
  if (names.size() > 1) out += str(" (and ", names.size() - 1, " more)");
  return out;
}

bool run_within(const StridedRun& r, int64_t numel) {
  if (r.start < 0 || r.len < 1 || r.count < 1 || r.stride < 0) return false;
  if (r.count > 1 && r.stride < r.len) return false;  // its intervals would overlap
  int64_t last = 0;  // start + (count - 1) * stride + len, overflow-checked
  if (__builtin_mul_overflow(r.count - 1, r.stride, &last)) return false;
  if (__builtin_add_overflow(last, r.start, &last)) return false;
  if (__builtin_add_overflow(last, r.len, &last)) return false;
  return last <= numel;
}

void check_manifest_coverage(const Manifest& m, const std::string& where) {
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    MT_REQUIRE(index.emplace(m.tensors[i].name, i).second, where, ": tensor ", m.tensors[i].name,
               " is listed twice");
  }
  // Every element of every tensor exactly once: the intervals of each tensor, sorted, must
  // tile 0..numel without a gap or an overlap. Tiling allows at most numel intervals of a
  // tensor; counted (overflow-checked) before any is expanded, so a crafted run count
  // fails here instead of allocating until memory runs out.
  std::vector<int64_t> intervals(m.tensors.size(), 0);
  for (const ManifestSegment& s : m.segments) {
    const auto it = index.find(s.tensor);
    MT_REQUIRE(it != index.end(), where, ": a segment in ", m.files[size_t(s.file)].name,
               " holds tensor ", s.tensor, ", which the manifest does not list");
    const int64_t numel = m.tensors[it->second].numel();
    for (const StridedRun& r : s.runs) {
      MT_REQUIRE(run_within(r, numel), where, ": a segment of tensor ", s.tensor, " in ",
                 m.files[size_t(s.file)].name, " lies outside the tensor's ", numel, " elements");
      int64_t& n = intervals[it->second];
      MT_REQUIRE(!__builtin_add_overflow(n, r.count, &n) && n <= numel, where, ": tensor ",
                 s.tensor, " is split into more pieces than it has elements (", numel, ")");
    }
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(m.tensors.size());
  for (size_t i = 0; i < spans.size(); ++i) spans[i].reserve(size_t(intervals[i]));
  for (const ManifestSegment& s : m.segments)
    for_each_interval(s.runs, [&](int64_t a, int64_t n) {
      spans[index[s.tensor]].push_back({a, n});
    });
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    auto& v = spans[i];
    std::sort(v.begin(), v.end());
    int64_t next = 0;
    for (const auto& [a, n] : v) {
      MT_REQUIRE(a <= next, where, ": the manifest does not cover tensor ", m.tensors[i].name,
                 " (elements ", next, "..", a - 1, " are in no shard)");
      MT_REQUIRE(a >= next, where, ": tensor ", m.tensors[i].name, " has element ", a,
                 " stored twice");
      next = a + n;
    }
    MT_REQUIRE(next == m.tensors[i].numel(), where, ": the manifest does not cover tensor ",
               m.tensors[i].name, " (elements ", next, "..", m.tensors[i].numel() - 1,
               " are in no shard)");
  }
}

}  // namespace mt
